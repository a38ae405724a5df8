"""Jump consistent hashing, tested alone as a pure function."""

from __future__ import annotations

import random

import pytest
from lavin.plugins.exchanges.jump_hash import jump_bucket

_random = random.Random(7)
KEYS = [_random.getrandbits(64) for _ in range(20_000)]


def test_agrees_with_published_values_of_the_papers_algorithm() -> None:
    # ClickHouse's jumpConsistentHash test reference values.
    cases = [(1, 1), (42, 57), (256, 1024), (3735883980, 1), (3735883980, 666),
             (16045690984833335023, 255)]  # fmt: skip
    assert [jump_bucket(key, buckets) for key, buckets in cases] == [0, 43, 520, 0, 361, 237]


@pytest.mark.parametrize("buckets", [1, 2, 7, 64, 1000])
def test_every_key_lands_in_range_and_buckets_fill_evenly(buckets: int) -> None:
    counts = [0] * buckets
    for key in KEYS:
        bucket = jump_bucket(key, buckets)
        assert 0 <= bucket < buckets
        counts[bucket] += 1
    expected = len(KEYS) / buckets
    if buckets <= 64:  # enough keys per bucket to bound each one
        assert max(abs(count - expected) for count in counts) < 0.2 * expected


@pytest.mark.parametrize("buckets", [1, 2, 3, 9, 10, 50])
def test_one_more_bucket_moves_only_the_keys_it_takes(buckets: int) -> None:
    moved = 0
    for key in KEYS:
        before, after = jump_bucket(key, buckets), jump_bucket(key, buckets + 1)
        assert after in (before, buckets)
        moved += after != before
    share = moved / len(KEYS)
    assert abs(share - 1 / (buckets + 1)) < 0.15 / (buckets + 1)


def test_keys_wider_than_64_bits_use_their_low_64_bits() -> None:
    assert jump_bucket((1 << 64) + 42, 57) == jump_bucket(42, 57)


def test_no_buckets_is_an_error() -> None:
    with pytest.raises(ValueError):
        jump_bucket(1, 0)
