"""Benchmarks: the `lavin-perf` load generator, broker comparisons and micro-benchmarks."""
