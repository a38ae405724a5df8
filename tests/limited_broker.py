"""A broker child under resource limits (setrlimit), and what the tests read of it in /proc."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from broker_process import BrokerProcess

# Sets the limits named in argv[1] ("RLIMIT_X:soft:hard,..."), then becomes the command in
# the rest of argv. Python ignores SIGXFSZ, so a write past RLIMIT_FSIZE fails with EFBIG.
_EXEC_WITH_LIMITS = (
    "import os, resource, sys\n"
    "for limit in sys.argv[1].split(','):\n"
    "    name, soft, hard = limit.split(':')\n"
    "    resource.setrlimit(getattr(resource, name), (int(soft), int(hard)))\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)


class LimitedBroker(BrokerProcess):
    """A broker child started with `limits` (resource name -> (soft, hard)); change them
    between a stop and the next start."""

    def __init__(self, data_dir: Path, limits: dict[str, tuple[int, int]], *, extra_args: Sequence[str] = ()) -> None:
        super().__init__(data_dir, extra_args=extra_args)
        self.limits = limits

    @property
    def command(self) -> list[str]:
        command = super().command
        if not self.limits:
            return command
        limits = ",".join(f"{name}:{soft}:{hard}" for name, (soft, hard) in self.limits.items())
        return [sys.executable, "-c", _EXEC_WITH_LIMITS, limits, *command[1:]]


def open_fds(pid: int) -> int:
    """How many file descriptors process `pid` holds."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def open_files_limit(pid: int) -> tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE of process `pid`."""
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError(f"no open files limit in /proc/{pid}/limits")
