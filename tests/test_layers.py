"""Data flows one way: loaders ← analysis ← store ← tui.

No reading touches disk (no store import, and no file I/O of its own: ``disk_io``), and nothing
below the viewer loads Textual or Rich.

Two checks, as harlequin does it: every import statement in the source (function-level ones too)
against the layer table, and a fresh interpreter that imports every headless module and then
looks at ``sys.modules``.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import ROOT

#: What each layer must not import, from the project and from the UI libraries.
#: ``store`` is the one place that touches disk besides reading the input; the loaders and the
#: readings are handed what they need of it (``loaders.use_cache``, ``analysis.memo.use_keeper``).
FORBIDDEN = {
    "loaders": ("gaplens.analysis", "gaplens.store", "gaplens.tui", "textual", "rich"),
    "analysis": ("gaplens.store", "gaplens.tui", "textual", "rich"),
    "store": ("gaplens.tui", "textual", "rich"),
}


def imported_names(path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: relative import; spell it gaplens.…")
            names.append((node.lineno, node.module or ""))
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_only_downwards(layer):
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in sorted((ROOT / layer).rglob("*.py"))
        for line, name in imported_names(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[layer])
    ]
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


#: How disk is reached, as the readings must never spell it: the store does all of it (``store.install``
#: hands the readings what they need). Modules whose import alone means files; calls by module; methods
#: that only a file or a path has; and the builtin ``open``.
DISK_MODULES = ("shutil", "tempfile", "sqlite3", "mmap", "glob", "gaplens.store")
DISK_CALLS = {
    "os": {"open", "fdopen", "replace", "remove", "unlink", "rename", "makedirs", "mkdir", "rmdir", "listdir",
           "scandir", "walk", "stat", "lstat", "truncate"},
    "os.path": {"exists", "isfile", "isdir", "getsize", "getmtime", "realpath"},
    "json": {"load", "dump"},
    "pickle": {"load", "dump"},
    "np": {"load", "save", "savez", "savez_compressed", "fromfile", "memmap", "loadtxt", "savetxt", "genfromtxt"},
    "numpy": {"load", "save", "savez", "savez_compressed", "fromfile", "memmap", "loadtxt", "savetxt", "genfromtxt"},
}  # fmt: skip
DISK_METHODS = {"open", "read_text", "read_bytes", "write_text", "write_bytes", "touch", "mkdir", "unlink", "rmdir",
                "iterdir", "is_file", "is_dir", "exists", "stat", "tofile"}  # fmt: skip


def _dotted(node: ast.expr) -> str:
    """``os.path.exists`` -> "os.path.exists"; "" when the callee is not a plain dotted name."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else ""
    return ""


def disk_io(source: str, filename: str = "<snippet>") -> list[tuple[int, str]]:
    """Every place a module reaches disk: a file-module import, ``open(...)``, a module's file call
    (``os.replace``, ``json.load``, ``pickle.dump``, ``np.load``; also imported by name), a path or file
    method (``Path(...).read_text()``, ``gzip.open(...)``)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if _is_disk_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _is_disk_module(node.module):
                found.append((node.lineno, f"from {node.module} import"))
            named = DISK_CALLS.get(node.module, set())
            found += [(node.lineno, f"from {node.module} import {a.name}") for a in node.names if a.name in named]
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            head, _, last = name.rpartition(".")
            if name == "open" or last in DISK_CALLS.get(head, ()):
                found.append((node.lineno, f"{name}(...)"))
            elif isinstance(node.func, ast.Attribute) and node.func.attr in DISK_METHODS:
                found.append((node.lineno, f".{node.func.attr}(...)"))
    return found


def _is_disk_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in DISK_MODULES)


def test_readings_never_touch_disk():
    """analysis/ does no file I/O (issue 28): no open, no path or file method, no file module."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sorted((ROOT / "analysis").rglob("*.py"))
        for line, what in disk_io(path.read_text(), str(path))
    ]
    assert not bad, "file I/O in the readings (the store does it):\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "snippet",
    [
        "open('x.json')",
        "from pathlib import Path\nPath(p).read_text()",
        "Path(p).write_bytes(b)",
        "with Path(p).open() as fh: pass",
        "import gzip\ngzip.open(p)",
        "import os\nos.replace(a, b)",
        "os.remove(p)",
        "os.path.exists(p)",
        "from os import replace",
        "import shutil",
        "import tempfile",
        "import sqlite3",
        "json.load(fh)",
        "pickle.dump(x, fh)",
        "pickle.load(fh)",
        "np.load(p)",
        "arr.tofile(p)",
        "from gaplens.store import cache",
        "import gaplens.store.readings",
    ],
)
def test_the_disk_scan_flags_each_way_to_disk(snippet):
    assert disk_io(snippet), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        "json.loads(s)",
        "orjson.dumps(x)",
        "pickle.dumps(x)",
        "name.replace('a', 'b')",
        "os.path.basename(p)",
        "os.cpu_count()",
        "np.concatenate(parts)",
    ],
)
def test_the_disk_scan_leaves_work_in_memory_alone(snippet):
    assert not disk_io(snippet), snippet


def test_project_imports_use_the_one_import_name():
    """``from loaders import …`` works only from a checkout; installed, it is ``gaplens.loaders``."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for folder in ("gaplens", "loaders", "analysis", "store", "tui", "bench", "tests", "tracegen")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, name in imported_names(path)
        if name.split(".")[0] in ("loaders", "analysis", "store", "tui", "samples")
    ]
    assert not bad, "\n".join(bad)


def test_headless_modules_load_no_ui():
    modules = [
        "gaplens." + ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for layer in FORBIDDEN
        for path in sorted((ROOT / layer).rglob("*.py"))
        if path.name != "__init__.py"
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


#: pyarrow's conversions that go through pandas (``to_pandas_dtype`` imports it in pyarrow <= 25),
#: and the one module allowed them: it makes the API's DataFrames.
PANDAS_BRIDGES = ("to_pandas_dtype", "to_pandas", "to_numpy")
MAKES_DATAFRAMES = {"loaders/tables.py"}


def test_the_load_path_never_reaches_pandas_through_pyarrow():
    """A headless load must not import pandas on any pyarrow version: loaders read Arrow buffers with numpy.

    The lean-load test sees only the installed pyarrow; this reads the source, so a call that
    imports pandas on an older pyarrow (as ``DataType.to_pandas_dtype`` did on 25) fails here too.
    """
    bad = []
    for path in sorted((ROOT / "loaders").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel in MAKES_DATAFRAMES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            if isinstance(node, ast.Attribute) and node.attr in PANDAS_BRIDGES:
                bad.append(f"{rel}:{node.lineno}: .{node.attr}")
    assert not bad, "pyarrow-to-pandas conversions on the load path:\n" + "\n".join(bad)
