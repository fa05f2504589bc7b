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
