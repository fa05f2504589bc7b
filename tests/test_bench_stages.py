"""``python -m bench.stages``: a load's CPU by stage, each stage timed on the thread that runs it."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT, sample


def test_stages_time_every_stage_of_a_real_load():
    out = subprocess.run(
        [sys.executable, "-m", "bench.stages", str(sample("decode_eager.json.gz")), "--workers", "2", "--block", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert "103,742 events kept" in out
    seconds = dict(re.findall(r"^  (.+?) +(\d+\.\d+) s CPU$", out, re.M))
    assert len(seconds) == 7, out
    assert float(seconds["Arrow parse (parse threads)"]) > 0 and float(seconds["build (reading thread)"]) > 0
    assert re.search(r"peak \d+ B per kept event", out)
