"""Rough edges a new user tripped on (issue 31), each from a shrunk input."""

from __future__ import annotations

import gzip
import re

import pytest

from gaplens.loaders.kineto.reader import GPU_CUT_OFF
from gaplens.tui.cli import main
from tests.conftest import sample


def _cut_before_gpu(tmp_path):
    """The smells sample cut just before its first kernel, copy or memset event: the host side only."""
    text = gzip.decompress(sample("smells.json.gz").read_bytes()).decode()
    first = min(m.start() for m in re.finditer(r'"cat": "(kernel|gpu_memcpy|gpu_memset)"', text))
    cut = text.rindex("{", 0, first)
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(text[:cut].encode()))
    return path


def test_a_cut_file_says_the_gpu_side_was_cut_off(tmp_path, capsys: pytest.CaptureFixture[str]):
    path = _cut_before_gpu(tmp_path)
    assert main(["summary", str(path)]) == 0
    out, err = capsys.readouterr()
    assert GPU_CUT_OFF in err  # one plain line, beside the cut-file warning
    assert "no GPU work in the trace" in out
    assert not re.search(r"GPU window\s+\d", out)  # was "GPU window 37.5 ms" beside 0 kernels


def test_an_intact_trace_keeps_its_gpu_window(capsys: pytest.CaptureFixture[str]):
    assert main(["summary", str(sample("smells.json.gz"))]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"GPU window\s+\d", out) and GPU_CUT_OFF not in err


# ---- steps that hold none of the GPU work (issue 31, reliability) ---------------------------------


def _steps_outside_the_gpu_work(tmp_path, steps: list[tuple[int, int]]):
    """A Kineto trace shrunk from the report's crash: ProfilerStep ranges (µs) that hold no GPU work,
    three kernels with an idle stretch between the first and the second::

        host  |step|..|launch|..............................|launch|.|launch|
        GPU                   |k|      (idle 4.7 ms)               |k|   |k|
    """
    import json

    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{i + 1}",
            "pid": 1,
            "tid": 1,
            "ts": a,
            "dur": b - a,
        }
        for i, (a, b) in enumerate(steps)
    ]
    for corr, (ts, kts) in enumerate([(200, 220), (5000, 5020), (5100, 5120)], 1):
        args = {"correlation": corr}
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts,
                       "dur": 10, "args": args})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": kts, "dur": 50,
                       "args": {**args, "device": 0, "stream": 7}})  # fmt: skip
    path = tmp_path / "steps.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


STEPS_OUTSIDE = {
    "the only step ends before the first kernel": [(0, 100)],
    "three steps before the first kernel": [(0, 30), (30, 60), (60, 90)],
    "three steps after the last kernel": [(6000, 6030), (6030, 6060), (6060, 6090)],
}


@pytest.mark.parametrize("steps", list(STEPS_OUTSIDE.values()), ids=list(STEPS_OUTSIDE))
@pytest.mark.parametrize(
    "command",
    [
        ["summary"],
        ["summary", "--json"],
        ["gaps"],
        ["smells"],
        ["floor"],
        ["whatif", "--remove", "host"],
        ["whatif", "--remove", "launch"],
        ["report"],  # ended in IndexError in the experiment's compute share (steps clipped to no span)
    ],
    ids=" ".join,
)
def test_every_reading_survives_steps_without_gpu_work(tmp_path, steps, command, capsys):
    path = _steps_outside_the_gpu_work(tmp_path, steps)
    assert main([command[0], str(path), *command[1:]]) == 0
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err


@pytest.mark.parametrize("steps", list(STEPS_OUTSIDE.values()), ids=list(STEPS_OUTSIDE))
def test_compare_and_export_survive_steps_without_gpu_work(tmp_path, steps, capsys):
    path = _steps_outside_the_gpu_work(tmp_path, steps)
    assert main(["compare", str(path), str(path), "--fail-on", "gap>+5%,compute<-5%"]) in (0, 2)
    assert main(["export", str(path), "--perfetto", str(tmp_path / "out.json"), "--csv", str(tmp_path / "csv")]) == 0
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err


# ---- the Perfetto export's traceName (issue 31, reliability) ---------------------------------------


def test_perfetto_trace_name_is_the_cleaned_file_name(tmp_path, capsys):
    import orjson

    folder = tmp_path / "home" / "someone" / "secret project"
    folder.mkdir(parents=True)
    hostile = folder / "run\u202egz.json\u009b31m\x1b[2Jx.json.gz"  # a bidi override, an 8-bit CSI, a screen clear
    hostile.write_bytes(sample("smells.json.gz").read_bytes())
    out = tmp_path / "out.json"
    assert main(["export", str(hostile), "--perfetto", str(out)]) == 0
    capsys.readouterr()
    top = orjson.loads(out.read_bytes())
    assert top["traceName"] == "rungz.jsonx.json.gz"  # the CSI sequences go whole, parameters too
    assert "someone" not in out.read_text(encoding="utf-8")  # the folders stay on the writer's disk


# ---- export memory is bounded by the events, not by name length x uses (issue 31, reliability) -----


@pytest.fixture(scope="module")
def long_name_export(tmp_path_factory):
    """The 1 MiB x 1,296 nsys export shrunk: one 64 KiB kernel name used by every one of 200 kernels."""
    import sqlite3

    from bench.nsys_synth import make_export

    path = tmp_path_factory.mktemp("long") / "long.sqlite"
    make_export(path, kernels=200)
    con = sqlite3.connect(path)
    big = "void very_long<" + "A" * (64 << 10) + ">()"
    first = "(SELECT min({0}) FROM CUPTI_ACTIVITY_KIND_KERNEL)"
    for col in ("demangledName", "shortName"):
        con.execute(f"UPDATE StringIds SET value = ? WHERE id = {first.format(col)}", (big,))
    con.execute(
        f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = {first.format('demangledName')}, "
        f"shortName = {first.format('shortName')}"
    )
    con.commit()
    con.close()
    return path, big


def test_perfetto_export_cuts_long_names_and_writes_each_once(long_name_export, tmp_path, capsys):
    import orjson

    from gaplens.store.perfetto import NAME_LIMIT

    path, big = long_name_export
    out = tmp_path / "out.json"
    assert main(["export", str(path), "--perfetto", str(out)]) == 0
    err = capsys.readouterr().err
    assert "1 name longer than 1,024 characters" in err and "200 events" in err
    data = out.read_bytes()
    # Was 200 x 64 KiB = 13 MB of repeated name; now the name once plus each event's head of it.
    assert len(data) < len(big) + 400 * (NAME_LIMIT + 600)
    assert data.count(big.encode()) == 1
    events = orjson.loads(data)["traceEvents"]
    assert max(len(e.get("name", "")) for e in events) < NAME_LIMIT + 64
    assert [e["args"]["full_name"] for e in events if "full_name" in e.get("args", {})] == [big]


def test_csv_export_keeps_names_as_a_table(long_name_export, tmp_path, capsys):
    import pyarrow.csv as pcsv

    path, big = long_name_export
    folder = tmp_path / "csv"
    assert main(["export", str(path), "--csv", str(folder)]) == 0
    assert "names.csv / details.csv" in capsys.readouterr().err
    assert (folder / "events.csv").stat().st_size < 2_000_000  # was ~26 MB: the name and details per event
    events = pcsv.read_csv(folder / "events.csv").to_pydict()
    names = pcsv.read_csv(folder / "names.csv").to_pydict()
    whole = dict(zip(names["name_id"], names["name"], strict=True))
    assert whole[events["name_id"][events["name"].index(next(n for n in events["name"] if "very_long" in n))]] == big
    details = pcsv.read_csv(folder / "details.csv").to_pydict()
    assert any(big in d for d in details["details"] if d)
