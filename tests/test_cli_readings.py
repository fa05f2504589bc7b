"""`gaplens gaps`, `smells` and `report`: the JSON contract, readable text, and clean errors."""

from __future__ import annotations

import json

import pytest

from gaplens.tui.cli import main
from tests.conftest import sample

GAP_KEYS = {"device", "start_ns", "end_ns", "dur_ns", "on_critical_path", "cause", "shares", "evidence"}
SMELL_KEYS = {"kind", "start_ns", "end_ns", "evidence", "lever"}


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_gaps_json_contract_largest_first(capsys):
    rc, out, _ = run(capsys, "gaps", str(sample("smells.json.gz")), "--json", "--top", "5")
    assert rc == 0
    doc = json.loads(out)
    assert set(doc) >= {"origin_ns", "gaps"} and isinstance(doc["origin_ns"], int)
    gaps = doc["gaps"]
    assert len(gaps) == 5
    for g in gaps:
        assert set(g) >= GAP_KEYS
        assert g["dur_ns"] == g["end_ns"] - g["start_ns"]
        assert g["cause"] in {"sync", "copy", "launch", "host", "unknown"}
    assert [g["dur_ns"] for g in gaps] == sorted((g["dur_ns"] for g in gaps), reverse=True)
    assert gaps[0]["on_critical_path"] and gaps[0]["cause"] == "host" and gaps[0]["evidence"]


def test_gaps_phase_filter_and_text(capsys):
    rc, out, _ = run(capsys, "gaps", str(sample("smells.json.gz")), "--phase", "elementwise_loop", "--top", "3")
    assert rc == 0
    assert "blank regions" in out and "elementwise_loop" in out
    assert "●" in out and "µs" in out
    assert len([ln for ln in out.splitlines() if ln.startswith("    ") and ln.split()[0].isdigit()]) == 3


def test_unknown_phase_is_unusable_input(capsys):
    rc, _, err = run(capsys, "gaps", str(sample("smells.json.gz")), "--phase", "no such phase")
    assert rc == 2
    assert err.startswith("gaplens: ") and "no such phase" in err and "Traceback" not in err


def test_smells_json_contract(capsys):
    rc, out, _ = run(capsys, "smells", str(sample("smells.json.gz")), "--json")
    assert rc == 0
    doc = json.loads(out)
    assert set(doc) >= {"origin_ns", "smells"}
    kinds = {f["kind"] for f in doc["smells"]}
    assert kinds == {"picket_fence", "host_island", "copy_on_path", "sync_cliff"}
    for f in doc["smells"]:
        assert set(f) >= SMELL_KEYS and f["lever"] and f["end_ns"] > f["start_ns"]
        assert not any(k.startswith("_") for k in f)


def test_smells_text_names_levers(capsys):
    rc, out, _ = run(capsys, "smells", str(sample("smells.json.gz")))
    assert rc == 0
    assert "picket_fence" in out and "levers:" in out and "CUDA graph" in out
    # One line per smell family, the instances underneath: tokenize's island in both steps is one line.
    assert "host island in 2 of 2 tokenize" in out


def test_report_writes_the_six_steps(capsys, tmp_path):
    target = tmp_path / "report.md"
    rc, _, err = run(capsys, "report", str(sample("smells.json.gz")), "-o", str(target))
    assert rc == 0 and "wrote" in err
    text = target.read_text()
    for k in range(1, 7):
        assert f"## {k}. " in text
    assert "NVIDIA H200" in text
    step4, step5 = text.split("## 4.")[1].split("## 5.")
    assert "› tokenize" in step4 and "cause: host" in step5.split("## 6.")[0]
    assert "host island" in text.split("## 6.")[1]


def test_report_to_stdout_and_unwritable_target(capsys, tmp_path):
    rc, out, _ = run(capsys, "report", str(sample("smells.json.gz")))
    assert rc == 0 and out.startswith("# gaplens report")
    rc, _, err = run(capsys, "report", str(sample("smells.json.gz")), "-o", str(tmp_path / "missing" / "r.md"))
    assert rc == 2 and "cannot write" in err


def test_report_quotes_saved_answers():
    from gaplens.analysis.protocol.report import report_markdown
    from tests.conftest import loaded

    text = report_markdown(loaded("smells.json.gz"), notes={1: "Llama-ish, batch 4\nbf16", "6": "try pinned memory"})
    assert "> Llama-ish, batch 4\n> bf16" in text
    assert "> try pinned memory" in text.split("## 6.")[1]


@pytest.mark.parametrize("command", ["gaps", "smells", "report"])
def test_missing_file_exits_2(capsys, tmp_path, command):
    rc, _, err = run(capsys, command, str(tmp_path / "nope.json.gz"))
    assert rc == 2 and err.startswith("gaplens: ")


def test_report_on_traces_missing_a_side():
    from gaplens.analysis.protocol.report import report_markdown
    from gaplens.loaders.events import EventColumns
    from gaplens.loaders.model import Device, Kind, LaneKind, Meta

    gpu_only = EventColumns()
    for k, (s, e) in enumerate([(0, 100), (300, 400)]):
        gpu_only.add((LaneKind.STREAM, 0, 7), s, e, f"k{k}", Kind.KERNEL, k)
    text = report_markdown(gpu_only.finish(Meta("nsys", path="g.sqlite", devices=[Device(0, "GPU")]), None))
    assert "collect a better trace first" in text.split("## 6.")[1]
    assert "nsys --trace=cuda,nvtx,osrt" in text

    cpu_only = EventColumns()
    cpu_only.add((LaneKind.CPU_OPS, 1, 1), 0, 100, "aten::add", Kind.CPU_OP)
    text = report_markdown(cpu_only.finish(Meta("kineto", path="c.json"), None))
    assert "no GPU activity" in text and "ProfilerActivity.CUDA" in text
