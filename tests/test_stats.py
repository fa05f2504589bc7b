"""analysis.stats: per-name tables against a brute-force count, and the summary reading printed from them."""

from __future__ import annotations

import numpy as np
import pytest

from gaplens.analysis.stats import COLUMNS, TABLES, name_stats, table_stats
from gaplens.analysis.summary import summary
from gaplens.loaders.model import Kind
from tests.conftest import loaded
from tests.handbuilt import Builder


def _brute(trace, kinds) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i in np.flatnonzero(trace.mask(kinds)).tolist():
        out.setdefault(trace.name(i), []).append(int(trace.end_ns[i] - trace.start_ns[i]))
    return out


@pytest.mark.parametrize("name", ["smells.json.gz", "nsys_smells.sqlite.gz"])
def test_every_row_matches_a_brute_force_count(name):
    trace = loaded(name)
    for _key, _title, kinds in TABLES:
        st = name_stats(trace, kinds)
        brute = _brute(trace, kinds)
        assert len(st) == len(brute)
        grand = sum(sum(d) for d in brute.values())
        for k in range(len(st)):
            d = sorted(brute[st.name(k)])
            assert st.count[k] == len(d) and st.total_ns[k] == sum(d)
            assert st.min_ns[k] == d[0] and st.max_ns[k] == d[-1]
            assert st.med_ns[k] == int(np.median(d)) and st.avg_ns[k] == int(np.mean(d))
            assert st.pct[k] == pytest.approx(100 * sum(d) / grand)
            inst = st.instances(k)
            assert sorted(trace.name(i) for i in inst.tolist()) == [st.name(k)] * len(d)
            assert (np.diff(trace.end_ns[inst] - trace.start_ns[inst]) >= 0).all()  # shortest first
        assert (np.diff(st.total_ns) <= 0).all()  # largest total first


def test_summary_prints_its_top_lists_from_the_same_rows():
    trace = loaded("smells.json.gz")
    s = summary(trace, top=5)
    tables = table_stats(trace)
    assert s["top_kernels"] == tables["kernels"].rows(5)
    assert s["top_cuda_api"] == tables["cuda_api"].rows(5)
    assert s["top_ranges"] == tables["ranges"].rows(5)
    assert int(tables["kernels"].total_ns.sum()) == s["kernels"]["total_ns"]
    assert int(tables["kernels"].count.sum()) == s["kernels"]["count"]


def test_sorting_by_any_column():
    b = Builder()
    b.launch(0, 10, 20, 25, name="b")  # 5 ns
    b.launch(30, 40, 50, 150, name="a")  # 100 ns
    b.launch(160, 170, 180, 190, name="c")  # 10 ns
    b.launch(200, 210, 220, 230, name="c")  # 10 ns
    st = name_stats(b.trace(), (Kind.KERNEL,))
    names = lambda order: [st.name(k) for k in order.tolist()]  # noqa: E731
    assert names(np.arange(len(st))) == ["a", "c", "b"]
    assert names(st.order("count"))[0] == "c"
    assert names(st.order("name", descending=False)) == ["a", "b", "c"]
    assert names(st.order("min_ns", descending=False)) == ["b", "c", "a"]
    for column in COLUMNS:
        assert sorted(st.order(column).tolist()) == [0, 1, 2]


def test_a_class_without_events_is_an_empty_table():
    b = Builder()
    b.launch(0, 10, 20, 25)
    st = name_stats(b.trace(), (Kind.ANNOTATION,))
    assert len(st) == 0 and st.rows() == [] and st.offsets.tolist() == [0]
