"""The six-step reading protocol: the walk's words and moves, the experiment, the report."""
