"""Installed, gaplens is one import name: the wheel holds ``gaplens/`` and its dist-info, nothing else.

A distribution that drops ``tui`` or ``samples`` into site-packages breaks any other project with
those names (and is broken by them).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(importlib.util.find_spec("setuptools") is None, reason="setuptools is not installed")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (path,) = out.glob("gaplens-*.whl")
    return zipfile.ZipFile(path)


def test_wheel_has_one_top_level_name(wheel):
    tops = {name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"gaplens"}


def test_wheel_holds_every_layer_and_the_data(wheel):
    names = set(wheel.namelist())
    for needed in (
        "gaplens/__init__.py",
        "gaplens/__main__.py",
        "gaplens/loaders/model.py",
        "gaplens/analysis/gaps.py",
        "gaplens/tui/app.py",
        "gaplens/tui/app.tcss",
        "gaplens/tui/commands/summary.py",
        "gaplens/tui/screens/help.py",
        "gaplens/samples/decode_eager.json.gz",
    ):
        assert needed in names, needed
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "gaplens = gaplens.tui.cli:main" in wheel.read(entry).decode()


def test_python_dash_m_gaplens(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "gaplens", "summary", "--json", str(ROOT / "samples" / "smells.json.gz")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert '"format": "kineto"' in out.stdout


def test_python_in_the_checkout_imports_the_layers_beside_gaplens(tmp_path):
    """`python -c "import gaplens; gaplens.load(...)"` in the repository root, with gaplens installed (not
    editable): the checkout's ``gaplens/`` comes first on sys.path and must still find ``loaders/`` and the rest."""
    import sysconfig

    code = "import gaplens, gaplens.loaders, gaplens.analysis.gaps; print(gaplens.loaders.__file__)"
    # -S: no site hooks, so no editable-install finder does the mapping for us; the dependencies come from PYTHONPATH.
    env = {"PYTHONPATH": sysconfig.get_paths()["purelib"], "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(ROOT / "loaders" / "__init__.py")
