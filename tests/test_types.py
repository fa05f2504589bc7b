"""The code type-checks: ``mypy loaders analysis tui bench`` exits 0 (STYLE.md: type hints are checked by mypy)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")


def test_mypy_clean():
    # Run from the checkout so pyproject's [tool.mypy] applies and the incremental
    # cache (.mypy_cache, git-ignored) keeps repeat runs around a second.
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "loaders", "analysis", "tui", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"mypy found errors:\n{done.stdout}{done.stderr}"
