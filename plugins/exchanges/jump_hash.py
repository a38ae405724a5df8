"""Jump consistent hashing (Lamping and Veach, "A Fast, Minimal Memory, Consistent Hash
Algorithm", 2014).

`jump_bucket(key, n)` spreads 64-bit keys evenly over buckets 0..n-1. Going from n to n+1
buckets moves only the keys that now belong to bucket n, about 1/(n+1) of them; every
other key keeps its bucket. Buckets can only be added or removed at the end.
"""

from __future__ import annotations

_KEY_MASK = (1 << 64) - 1
_MULTIPLIER = 2862933555777941757  # the 64-bit linear congruential step of the paper
_SCALE = float(1 << 31)


def jump_bucket(key: int, bucket_count: int) -> int:
    """The bucket in [0, bucket_count) of a 64-bit key."""
    if bucket_count < 1:
        raise ValueError(f"bucket_count must be at least 1, not {bucket_count}")
    key &= _KEY_MASK
    bucket, candidate = -1, 0
    while candidate < bucket_count:
        bucket = candidate
        key = (key * _MULTIPLIER + 1) & _KEY_MASK
        candidate = int((bucket + 1) * (_SCALE / ((key >> 33) + 1)))
    return bucket
