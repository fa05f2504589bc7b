"""The real `gaplens` command line, run many times fast: a server imports it once and forks one child per call.

Each call is its own process, as ``python -m gaplens CMD FILE`` is: its own stdout and
stderr (files, read back byte for byte), its own exit status, a wall-clock limit
(killed past it: a hang) and a resident-memory limit (killed past it: a blow-up),
and its peak RSS from ``wait4``. Only the interpreter start-up and the imports are
shared, which is what makes thousands of runs affordable on two cores.

    server = CliServer()
    result = server.run(["summary", "trace.json"], timeout_s=10)
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024 if hasattr(os, "sysconf") else 4


@dataclass
class Result:
    """One command-line run."""

    argv: list[str]
    rc: int | None  # None when killed
    out: bytes
    err: bytes
    wall_s: float
    peak_rss_mb: float
    timed_out: bool = False
    over_memory: bool = False


class CliServer:
    """A process that has imported gaplens and forks a child per request."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, **(env or {})}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.clirun"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=root,
        )
        hello = json.loads(self._readline())
        self.base_rss_mb: float = hello["rss_mb"]

    def _readline(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the CLI server died")
        return line.decode()

    def run(self, argv: list[str], timeout_s: float = 10.0, rss_limit_mb: float = 4096.0) -> Result:
        """Run ``gaplens ARGV`` in a fresh child; returns its outcome."""
        return self.run_many([argv], timeout_s, rss_limit_mb)[0]

    def run_many(self, argvs: list[list[str]], timeout_s: float = 30.0, rss_limit_mb: float = 4096.0) -> list[Result]:
        """Run several command lines one after the other in one fresh child (one fork, shared limits).

        Each gets its own stdout, stderr and exit status; when the child is killed, the
        command that was running and those after it share the kill.
        """
        assert self.proc.stdin is not None
        req = {"argvs": argvs, "timeout_s": timeout_s, "rss_limit_mb": rss_limit_mb}
        self.proc.stdin.write((json.dumps(req) + "\n").encode())  # ensure_ascii keeps surrogates as escapes
        self.proc.stdin.flush()
        r = json.loads(self._readline())
        return [
            Result(
                argv=argv,
                rc=one["rc"],
                out=base64.b64decode(one["out"]),
                err=base64.b64decode(one["err"]),
                wall_s=one["wall_s"] if one["wall_s"] is not None else r["wall_s"],
                peak_rss_mb=r["peak_rss_mb"],
                timed_out=r["timed_out"],
                over_memory=r["over_memory"],
            )
            for argv, one in zip(argvs, r["runs"], strict=True)
        ]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> CliServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- the server side --------------------------------------------------------------------


def _preload() -> None:
    """Import what the commands import, so each child starts warm (no threads are started here)."""
    import gaplens.analysis.gaps
    import gaplens.analysis.smells
    import gaplens.analysis.summary
    import gaplens.loaders.kineto.reader
    import gaplens.loaders.nsys.reader
    import gaplens.tui.cli
    import gaplens.tui.commands.compare
    import gaplens.tui.commands.readings
    import gaplens.tui.commands.summary  # noqa: F401


def _rss_mb(pid: int | None = None) -> float:
    try:
        with open(f"/proc/{pid or 'self'}/statm") as fh:
            return int(fh.read().split()[1]) * PAGE_KB / 1024
    except (OSError, ValueError, IndexError):
        return 0.0


def _child(argvs: list[list[str]], files: Sequence[tuple[BinaryIO, BinaryIO]], status: BinaryIO) -> None:
    """In the forked child: become ``python -m gaplens ARGV`` for each argv in turn, outputs on its files.

    Exit statuses and times go to ``status`` as they happen (one JSON line per command),
    so a child killed mid-way still tells which commands finished.
    """
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    real = sys.__stdout__
    enc, errors = (real.encoding, real.errors) if real is not None else ("utf-8", "strict")  # as Python chose
    from gaplens.tui.cli import main

    code = 0
    for argv, (out, err) in zip(argvs, files, strict=True):
        t0 = time.perf_counter()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=enc, errors=errors)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding=enc, errors="backslashreplace")
        try:
            result = main(argv)
            code = result if isinstance(result, int) else 0
        except SystemExit as exc:  # argparse, and anything calling sys.exit
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # what the interpreter would do with an uncaught exception
            traceback.print_exc()
            code = 1
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            code = 1
        status.write((json.dumps({"rc": code, "wall_s": time.perf_counter() - t0}) + "\n").encode())
        status.flush()
    os._exit(code)


def _serve_one(req: dict) -> dict:
    argvs, timeout_s, limit_mb = req["argvs"], float(req["timeout_s"]), float(req["rss_limit_mb"])
    with contextlib.ExitStack() as stack:
        temp = lambda: stack.enter_context(tempfile.TemporaryFile())  # noqa: E731
        files = [(temp(), temp()) for _ in argvs]
        status_file = temp()
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                _child(argvs, files, status_file)
            finally:
                os._exit(1)
        timed_out = over_memory = False
        usage = None
        while True:
            done, _, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.perf_counter() - t0 > timeout_s:
                timed_out = True
            elif _rss_mb(pid) > limit_mb:
                over_memory = True
            if timed_out or over_memory:
                os.kill(pid, signal.SIGKILL)
                _, _, usage = os.wait4(pid, 0)
                break
            time.sleep(0.002)
        wall = time.perf_counter() - t0
        status_file.seek(0)
        done_runs = [json.loads(line) for line in status_file.read().decode().splitlines()]
        runs = []
        for k, (out, err) in enumerate(files):
            out.seek(0)
            err.seek(0)
            finished = done_runs[k] if k < len(done_runs) else {"rc": None, "wall_s": None}
            runs.append(
                {
                    "rc": finished["rc"],
                    "wall_s": finished["wall_s"],
                    "out": base64.b64encode(out.read()).decode(),
                    "err": base64.b64encode(err.read()).decode(),
                }
            )
        return {
            "runs": runs,
            "wall_s": wall,
            "peak_rss_mb": (usage.ru_maxrss / 1024) if usage is not None else 0.0,
            "timed_out": timed_out,
            "over_memory": over_memory,
        }


def serve() -> None:
    """Read JSON requests from stdin, answer each with one JSON line on stdout."""
    _preload()
    channel = sys.stdout.buffer
    channel.write((json.dumps({"rss_mb": _rss_mb()}) + "\n").encode())
    channel.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        channel.write((json.dumps(_serve_one(json.loads(line))) + "\n").encode())
        channel.flush()


if __name__ == "__main__":
    serve()
