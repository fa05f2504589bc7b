"""The bad-input corpus through the real command line: a load with a warning or one clean error line, never a crash.

Every corpus file (``bench.corpus``, generated here into tmp) goes through ``gaplens
summary``, ``gaps`` and ``smells``, each a process of its own (``bench.clirun`` forks
them from a warm server). A few also go through ``python -m gaplens`` itself, and
must come out byte for byte the same.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from bench.clirun import CliServer, Result
from bench.corpus import generate

COMMANDS = ("summary", "gaps", "smells")
LIMIT_S = 10.0
# Any control character but the newline, in bytes: C0, DEL, and C1 as UTF-8 (C2 80..C2 9F).
CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[Path]:
    return generate(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    return {
        "GAPLENS_CACHE_DIR": str(tmp_path_factory.mktemp("cache")),
        "GAPLENS_STATE_DIR": str(tmp_path_factory.mktemp("state")),
        "PATH": "/usr/bin:/bin",  # no nsys: a .nsys-rep must say how to export it
    }


def problems(r: Result) -> list[str]:
    """What is wrong with one run, per the command-line contract (DESIGN.md) and issue 10."""
    out: list[str] = []
    if r.timed_out or r.wall_s > LIMIT_S:
        out.append(f"took {r.wall_s:.1f} s")
    if r.over_memory:
        out.append("over the memory limit")
    if r.rc not in (0, 2):
        out.append(f"exit {r.rc}: {r.err.decode(errors='replace')[-300:]}")
    if CONTROL.search(r.out) or CONTROL.search(r.err):
        out.append("a control character on stdout/stderr")
    err_lines = r.err.decode(errors="replace").splitlines()
    if r.rc == 2 and (len(err_lines) != 1 or not err_lines[0].startswith("gaplens: ")):
        out.append(f"exit 2 needs one line on stderr, got {err_lines!r}")
    if r.rc == 0 and not all(line.startswith("gaplens: warning: ") for line in err_lines):
        out.append(f"exit 0 with stderr that is not warnings: {err_lines!r}")
    if b"Traceback" in r.out + r.err:
        out.append("a traceback")
    return out


def test_corpus_covers_both_formats_and_the_issue(corpus: list[Path]) -> None:
    names = [p.name for p in corpus]
    assert len(corpus) >= 60
    assert sum(n.startswith("kineto_") for n in names) >= 30 and sum(n.startswith("nsys_") for n in names) >= 25
    for case in (
        "kineto_kernel_without_args.json",
        "kineto_ts_1e999000_costly.json",
        "kineto_base_time_2_70.json",
        "kineto_lone_surrogates.json",
        "kineto_utf8_bom.json",
        "kineto_gzip_then_junk.json.gz",
        "kineto_double_comma.json",
        "nsys_device_id_2_40.sqlite",
        "nsys_non_utf8_schema_sql.sqlite",
        "nsys_renamed_start_column.sqlite",
        "nsys_sparse_rowids.sqlite",
        "nsys_events_span_past_int64.sqlite",
        "special_fifo.json",
    ):
        assert case in names, case


def test_every_corpus_file_through_the_cli(corpus: list[Path], env: dict[str, str]) -> None:
    jobs = [(str(p), cmd) for p in corpus for cmd in COMMANDS]
    servers = [CliServer(env) for _ in range(2)]
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            chunks = [jobs[k :: len(servers)] for k in range(len(servers))]
            results = [
                r
                for part in pool.map(lambda k: [servers[k].run([c, p], LIMIT_S + 5) for p, c in chunks[k]], range(2))
                for r in part
            ]
    finally:
        for s in servers:
            s.close()
    failures = {f"{r.argv[0]} {os.path.basename(r.argv[1])!a}": problems(r) for r in results if problems(r)}
    assert not failures, failures
    outcomes = Counter((r.rc, bool(r.err) if r.rc == 0 else True) for r in results)
    # Both answers occur: damage the loader repairs (exit 0 + warning) and input it refuses (exit 2).
    assert outcomes[(0, True)] >= 60 and outcomes[(2, True)] >= 40, outcomes
    # What the loader repaired, it says: a file whose load was repaired warns on every command.
    warned = {os.path.basename(r.argv[1]) for r in results if r.rc == 0 and r.err}
    for name in ("kineto_ts_nan.json", "kineto_gzip_then_junk.json.gz", "nsys_device_id_2_40.sqlite"):
        assert name in warned, name


def test_python_m_gaplens_matches_the_forked_runs(corpus: list[Path], env: dict[str, str]) -> None:
    """The fork server is the real command line: ``python -m gaplens`` gives the same bytes and status."""
    names = ("kineto_escapes_everywhere.json", "kineto_ts_1e999000_costly.json", "nsys_text_in_global_tid.sqlite")
    paths = [next(p for p in corpus if p.name == name) for name in names]
    with CliServer(env) as server:
        forked = [server.run(["summary", str(p)], LIMIT_S + 5) for p in paths]
    for path, run in zip(paths, forked, strict=True):
        real = subprocess.run(
            [sys.executable, "-m", "gaplens", "summary", str(path)],
            capture_output=True,
            timeout=60,
            env={**os.environ, **env},
        )
        assert (real.returncode, real.stdout, real.stderr) == (run.rc, run.out, run.err), path.name
        assert not problems(run)
