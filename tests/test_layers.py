"""Data flows one way: loaders ← analysis ← store ← tui.

No reading touches disk, and nothing below the viewer loads Textual or Rich.

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
