"""Kineto / PyTorch-profiler Chrome-trace JSON: the reader and its parsing stages."""
