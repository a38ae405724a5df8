"""`lavin serve` tunes glibc's malloc (lavin.broker.runtime.allocator) so that one large body
after another reuses memory instead of faulting in fresh pages. Measured in a fresh
process each: the minor page faults of a broker-like pattern of allocations (socket reads
of 256 KiB, 1 MiB bodies that live for a few steps), per step."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the tuning is for glibc's malloc")

PATTERN = """
import random
import resource
import sys
from collections import deque

if sys.argv[1] == "tuned":
    from lavin.broker.runtime.allocator import tune_allocator

    tune_allocator()
rng = random.Random(1)
bodies = deque()
reads = []


def step():
    for _ in range(4):
        reads.append(bytes(256 << 10))
    bodies.append(bytearray(1 << 20))
    while len(bodies) > rng.randrange(2, 12):
        bodies.popleft()
    if rng.random() < 0.5:
        reads.clear()


for _ in range(50):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(300):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 300)
"""


def faults_per_step(mode: str) -> float:
    result = subprocess.run(
        [sys.executable, "-c", PATTERN, mode], capture_output=True, text=True, timeout=60, check=True
    )
    return float(result.stdout)


def test_large_bodies_reuse_memory_once_the_allocator_is_tuned() -> None:
    untuned = faults_per_step("default")
    tuned = faults_per_step("tuned")
    assert untuned > 10, f"glibc's defaults fault {untuned:.1f} pages per step: the pattern shows nothing here"
    assert tuned < 2, f"{tuned:.1f} page faults per 1 MiB body with the allocator tuned"


BURST = """
from lavin.broker.runtime.allocator import release_free_memory, tune_allocator


def resident() -> int:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * 4096


tune_allocator()
idle = resident()
burst = [bytearray(1 << 20) for _ in range(48)]
del burst
kept = resident() - idle
release_free_memory()
print(kept, resident() - idle)
"""


def test_memory_freed_in_a_burst_goes_back_when_released() -> None:
    result = subprocess.run([sys.executable, "-c", BURST], capture_output=True, text=True, timeout=60, check=True)
    kept, after_release = map(int, result.stdout.split())
    assert kept > 32 << 20, f"only {kept >> 20} MiB of the freed 48 MiB stayed for reuse"
    assert after_release < 8 << 20, f"{after_release >> 20} MiB still held after release_free_memory"
