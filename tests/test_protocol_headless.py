"""The protocol's data layer stays headless: no Textual or Rich behind analysis.notes/workload/compare/protocol."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_protocol_readings_do_not_import_the_ui() -> None:
    code = (
        "import sys; import analysis.notes, analysis.workload, analysis.compare, analysis.protocol; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')); print(bad); "
        "sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
