"""CI step: mypy over the installed package ``gaplens`` and ``bench``; exits with mypy's status.

mypy cannot follow setuptools' editable-install import hook, so this lays out the package as the
wheel does (``gaplens/loaders`` → ``loaders/`` and so on, as links) in a temp folder and checks that tree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The import name → the repository folder, as pyproject's [tool.setuptools.package-dir] maps them.
PACKAGE_DIRS = {"loaders": "loaders", "analysis": "analysis", "store": "store", "tui": "tui", "samples": "samples"}


def package_tree(where: Path) -> Path:
    """A ``gaplens`` folder under ``where`` whose parts link to the repository's folders."""
    top = where / "gaplens"
    top.mkdir()
    for name in os.listdir(ROOT / "gaplens"):
        if name.endswith(".py"):
            (top / name).symlink_to(ROOT / "gaplens" / name)
    for name, folder in PACKAGE_DIRS.items():
        (top / name).symlink_to(ROOT / folder, target_is_directory=True)
    return top


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="gaplens-mypy-") as tmp:
        package_tree(Path(tmp))
        config = str(ROOT / "pyproject.toml")
        cmd = [sys.executable, "-m", "mypy", "--config-file", config, "-p", "gaplens", "-p", "bench"]
        # The incremental cache (.mypy_cache, git-ignored) keeps repeat runs around a second.
        return subprocess.run(cmd, cwd=ROOT, env={**os.environ, "MYPYPATH": tmp}, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
