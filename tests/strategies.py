"""Hypothesis strategies shared by the Kineto tests: events of any shape the writer (or a hostile file) makes."""

from __future__ import annotations

from hypothesis import strategies as st


def kineto_events(names: st.SearchStrategy[str], arg_values: st.SearchStrategy) -> st.SearchStrategy[dict]:
    """One event: a phase, a name, int or string pid, an int tid or "stream 7", a ts, args of ``arg_values``."""
    return st.fixed_dictionaries(
        {
            "ph": st.sampled_from(["X", "M", "i"]),
            "name": names,
            "pid": st.one_of(st.integers(0, 9), names),
            "tid": st.one_of(st.integers(0, 9), st.just("stream 7")),
            "ts": st.integers(0, 10**15),
            "args": st.dictionaries(names, arg_values),
        }
    )
