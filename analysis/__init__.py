"""Readings over a Trace: pure functions shared by the TUI and the headless commands."""
