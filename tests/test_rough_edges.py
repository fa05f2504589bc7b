"""Rough edges a new user tripped on (issue 31), each from a shrunk input."""

from __future__ import annotations

import gzip
import re

import pytest

from gaplens.loaders.kineto.reader import GPU_CUT_OFF
from gaplens.tui.cli import main
from tests.conftest import sample


def _cut_before_gpu(tmp_path):
    """The smells sample cut just before its first kernel, copy or memset event: the host side only."""
    text = gzip.decompress(sample("smells.json.gz").read_bytes()).decode()
    first = min(m.start() for m in re.finditer(r'"cat": "(kernel|gpu_memcpy|gpu_memset)"', text))
    cut = text.rindex("{", 0, first)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(text[:cut].encode()))
    return path


def test_a_cut_file_says_the_gpu_side_was_cut_off(tmp_path, capsys: pytest.CaptureFixture[str]):
    path = _cut_before_gpu(tmp_path)
    assert main(["summary", str(path)]) == 0
    out, err = capsys.readouterr()
    assert GPU_CUT_OFF in err  # one plain line, beside the cut-file warning
    assert "no GPU work in the trace" in out
    assert not re.search(r"GPU window\s+\d", out)  # was "GPU window 37.5 ms" beside 0 kernels


def test_an_intact_trace_keeps_its_gpu_window(capsys: pytest.CaptureFixture[str]):
    assert main(["summary", str(sample("smells.json.gz"))]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"GPU window\s+\d", out) and GPU_CUT_OFF not in err
