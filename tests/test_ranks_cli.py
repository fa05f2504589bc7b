"""`gaplens ranks`: the JSON contract, folders, bad rank files, mixed formats, the pool and Dask."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from gaplens.tui.cli import main
from tests.test_ranks import CONTRACT_RANK, CONTRACT_STRAGGLER, DATA, pair


def _run(capsys, *argv: str) -> tuple[int, str, list[str]]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, [line for line in err.splitlines() if line.strip()]


def test_json_contract_in_process(capsys):
    rc, out, err = _run(capsys, "ranks", *pair("ddp_straggler"), "--json", "--workers", "0")
    assert rc == 0 and err == []
    doc = json.loads(out)
    assert set(doc) == {"ranks", "straggler", "collectives", "clock_offsets_ns"}
    assert [r["rank"] for r in doc["ranks"]] == [1, 0]  # most waiting imposed first
    assert all(set(r) == CONTRACT_RANK for r in doc["ranks"])
    assert set(doc["straggler"]) == CONTRACT_STRAGGLER
    assert doc["straggler"]["rank"] == 1 and doc["straggler"]["cause"] == "host"
    assert doc["collectives"] == 36


def test_text_names_the_straggler_and_the_control_has_none(capsys):
    rc, out, _ = _run(capsys, "ranks", *pair("ddp_straggler"), "--workers", "0")
    assert rc == 0
    assert "straggler: rank 1" in out and "data_wait" in out and "why: host" in out
    rc, out, _ = _run(capsys, "ranks", *pair("ddp_even"), "--workers", "0")
    assert rc == 0 and "no straggler" in out


def test_a_folder_on_the_local_process_pool(tmp_path, capsys):
    """The default: per-rank tasks in worker processes; ranks 10 and 2 sort as numbers, not text."""
    for r, src in zip((2, 10), pair("ddp_straggler"), strict=True):
        shutil.copy(src, tmp_path / f"worker_rank{r}.json.gz")
    (tmp_path / "worker_rank2.json.gz.gaplens.json").write_text("{}")  # gaplens's own notes: never a rank
    # The folder, and one of its files again by name: read once.
    rc, out, err = _run(capsys, "ranks", str(tmp_path), str(tmp_path / "worker_rank2.json.gz"), "--json")
    assert rc == 0 and err == []
    doc = json.loads(out)
    assert doc["straggler"]["rank"] == 1 and len(doc["ranks"]) == 2
    assert [Path(r["source"]).name for r in sorted(doc["ranks"], key=lambda r: r["rank"])] == [
        "worker_rank2.json.gz",
        "worker_rank10.json.gz",
    ]


def test_bad_rank_files_are_one_warning_each_and_the_job_still_reads(tmp_path, capsys):
    good = pair("ddp_straggler")
    missing = tmp_path / "missing_rank.json.gz"
    corrupt = tmp_path / "corrupt_rank.json.gz"
    corrupt.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "na')[:40])  # a gzip stream cut short
    not_trace = tmp_path / "notes.json"
    not_trace.write_text('{"hello": "world"}')
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\x00\x01binary")
    rc, out, err = _run(
        capsys, "ranks", good[0], str(missing), str(corrupt), str(not_trace), str(garbage), good[1], "--workers", "0"
    )
    assert rc == 0
    assert "straggler: rank 1" in out
    assert len(err) == 4, err
    for bad, line in zip((missing, corrupt, not_trace, garbage), err, strict=True):
        assert line.startswith("gaplens: warning: ") and str(bad) in line


def test_no_usable_rank_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("not json at all")
    rc, out, err = _run(capsys, "ranks", str(bad), str(tmp_path / "absent.json"), "--workers", "0")
    assert rc == 2 and out == ""
    assert err[-1].startswith("gaplens: no usable rank")
    rc, _, err = _run(capsys, "ranks", str(tmp_path / "empty_dir_has_none"), "--workers", "0")
    assert rc == 2


def test_mixed_formats_are_one_line(capsys):
    rc, out, err = _run(capsys, "ranks", pair("ddp_even")[0], str(DATA / "nsys_ddp_straggler.sqlite.gz"))
    assert rc == 2 and out == "" and len(err) == 1 and "mixed formats" in err[0]


def test_dask_missing_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # import fails as if not installed
    rc, _, err = _run(capsys, "ranks", *pair("ddp_even"), "--dask", "local:1")
    assert rc == 2 and len(err) == 1 and "dask" in err[0] and "pip install" in err[0]


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="dask.distributed not installed")
def test_dask_local_cluster_reads_the_same_job(capsys):
    """The per-rank tasks on a Dask LocalCluster give the job the local pool gives."""
    rc, out, _ = _run(capsys, "ranks", *pair("ddp_straggler"), "--json", "--dask", "local:1")
    assert rc == 0
    _, local_out, _ = _run(capsys, "ranks", *pair("ddp_straggler"), "--json", "--workers", "0")
    assert json.loads(out) == json.loads(local_out)


def test_the_viewer_takes_a_job(monkeypatch):
    """``gaplens PATH...`` and ``gaplens DIR`` open the rank overview, one path the single-trace viewer."""
    import gaplens.tui.app
    import gaplens.tui.screens.job

    seen = []
    monkeypatch.setattr(gaplens.tui.screens.job, "run_job_viewer", lambda paths: seen.append(("job", paths)) or 0)
    monkeypatch.setattr(gaplens.tui.app, "run_app", lambda path, early=None: seen.append(("one", path)) or 0)
    assert main(pair("ddp_even")) == 0
    assert main([str(DATA)]) == 0
    assert main([pair("ddp_even")[0]]) == 0
    assert seen == [("job", pair("ddp_even")), ("job", [str(DATA)]), ("one", pair("ddp_even")[0])]
