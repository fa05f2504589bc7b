"""Installed, gaplens is one import name: the wheel holds ``gaplens/`` and its dist-info, nothing else.

A distribution that drops ``tui`` or ``samples`` into site-packages breaks any other project with
those names (and is broken by them). The wheel is built and judged by ``.ci/run`` (its own step,
``.ci/check_wheel.py``); these tests are the cheap part: the judge itself, and the package as run.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile

from tests.conftest import ROOT


def _check_wheel():
    """``.ci/check_wheel.py`` (CI builds the wheel as its own step; here only its judge is tested)."""
    spec = importlib.util.spec_from_file_location("check_wheel", ROOT / ".ci" / "check_wheel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel(tmp_path, names: list[str], entry: str = "[console_scripts]\ngaplens = gaplens.tui.cli:main\n"):
    path = tmp_path / "gaplens-0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name in names:
            zf.writestr(name, "")
        zf.writestr("gaplens-0.dist-info/entry_points.txt", entry)
    return zipfile.ZipFile(path)


def test_the_wheel_check_passes_a_whole_wheel_and_names_what_a_bad_one_lacks(tmp_path):
    check = _check_wheel()
    assert check.problems(_wheel(tmp_path, list(check.NEEDED))) == []
    bad = _wheel(tmp_path, [*check.NEEDED[1:], "tui/app.py"], entry="")
    found = check.problems(bad)
    assert found[0] == "top-level names ['gaplens', 'tui'], want ['gaplens']"
    assert f"missing {check.NEEDED[0]}" in found and any("console script" in f for f in found)


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
    import site
    import sysconfig

    code = "import gaplens, gaplens.loaders, gaplens.analysis.gaps; print(gaplens.loaders.__file__)"
    # -S: no site hooks, so no editable-install finder does the mapping for us; the dependencies come from PYTHONPATH:
    # every site folder this interpreter reads (a venv made with --system-site-packages finds numpy outside its own).
    paths = sysconfig.get_paths()
    sites = dict.fromkeys([paths["purelib"], paths["platlib"], *site.getsitepackages()])
    env = {"PYTHONPATH": os.pathsep.join(sites), "PATH": ""}
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(ROOT / "loaders" / "__init__.py")
