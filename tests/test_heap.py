"""A big load's allocator settings last as long as the load, nested or not, and are put back after."""

from __future__ import annotations

import numpy as np
import pytest

from gaplens.loaders import heap

pytestmark = pytest.mark.skipif(heap._hugepage_switch() is None, reason="numpy without the huge-page switch")


def _huge_pages() -> bool:
    switch = heap._hugepage_switch()
    before = switch(False)
    switch(before)
    return bool(before)


@pytest.mark.parametrize("setting", [True, False])
def test_big_load_restores_numpy_setting_after_nested_loads(setting):
    switch = heap._hugepage_switch()
    before = switch(setting)
    try:
        with heap.big_load():
            assert not _huge_pages()
            with heap.big_load():
                np.ones(1 << 20).sum()
            assert not _huge_pages()  # the outer load still runs
        assert _huge_pages() is setting
    finally:
        switch(before)


def test_big_load_restores_after_an_error():
    with pytest.raises(RuntimeError), heap.big_load():
        raise RuntimeError("the load failed")
    assert heap._holders == 0


class _FakeLibc:
    """What the heap module asks of glibc, recorded: (mallopt parameter, value) pairs and trims."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def fns(self):
        return (lambda pad: self.calls.append(("trim", pad)), lambda param, value: self.calls.append((param, value)))


def test_many_threads_fixes_the_mmap_threshold_for_the_outermost_load_only(monkeypatch):
    fake = _FakeLibc()
    monkeypatch.setattr(heap, "_libc", fake.fns)
    with heap.many_threads(4 << 20):
        assert fake.calls == [(heap._M_MMAP_THRESHOLD, 4 << 20)]
        with heap.many_threads(8 << 20):
            pass
        assert len(fake.calls) == 1  # the outer load still runs
    assert fake.calls[1:] == [
        (heap._M_MMAP_THRESHOLD, heap._DYNAMIC_MMAP_THRESHOLD),
        (heap._M_TRIM_THRESHOLD, heap._DYNAMIC_TRIM_THRESHOLD),
        ("trim", 0),
    ]
    assert heap._thread_holders == 0


def test_many_threads_leaves_a_running_big_loads_trim_threshold(monkeypatch):
    fake = _FakeLibc()
    monkeypatch.setattr(heap, "_libc", fake.fns)
    with heap.big_load():
        with pytest.raises(RuntimeError), heap.many_threads(4 << 20):
            raise RuntimeError("the load failed")
        assert (heap._M_TRIM_THRESHOLD, heap._DYNAMIC_TRIM_THRESHOLD) not in fake.calls
    assert heap._thread_holders == 0 and heap._holders == 0


@pytest.mark.parametrize(("workers", "fixed"), [(2, False), (8, True)])
def test_a_kineto_load_on_many_threads_fixes_the_threshold(monkeypatch, workers, fixed):
    from gaplens.loaders.kineto import reader as kineto
    from tests.conftest import sample

    fake = _FakeLibc()
    monkeypatch.setattr(heap, "_libc", fake.fns)
    monkeypatch.setattr(kineto, "WORKERS", workers)
    kineto.load_kineto(str(sample("train_step.json.gz")))
    assert ((heap._M_MMAP_THRESHOLD, 2 * kineto.BLOCK_SIZE) in fake.calls) is fixed
