"""The code type-checks: mypy over the installed package ``gaplens`` and ``bench`` exits 0.

mypy cannot follow setuptools' editable-install import hook, so the test lays out the package as
the wheel does (``gaplens/loaders`` → ``loaders/`` and so on, as links) and checks that tree.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")

#: The import name → the repository folder, as pyproject's [tool.setuptools.package-dir] maps them.
PACKAGE_DIRS = {"": "gaplens", "loaders": "loaders", "analysis": "analysis", "tui": "tui", "samples": "samples"}


def package_tree(where: Path) -> Path:
    """A ``gaplens`` folder under ``where`` whose parts link to the repository's folders."""
    top = where / "gaplens"
    top.mkdir()
    for name in os.listdir(ROOT / "gaplens"):
        if name.endswith(".py"):
            (top / name).symlink_to(ROOT / "gaplens" / name)
    for name, folder in PACKAGE_DIRS.items():
        if name:
            (top / name).symlink_to(ROOT / folder, target_is_directory=True)
    return top


def test_mypy_clean(tmp_path):
    package_tree(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "gaplens", "-p", "bench"],
        # The incremental cache (.mypy_cache, git-ignored) keeps repeat runs around a second.
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"mypy found errors:\n{done.stdout}{done.stderr}"
