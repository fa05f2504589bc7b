"""Benchmarks: `python -m bench` prints ratios against baselines measured in the same run."""
