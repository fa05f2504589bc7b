"""A seeded mutation fuzzer over Kineto, nsys and XSpace inputs, through the real command line: crashes, hangs, memory.

Each input is one of the seeds (``bench.seeds``) with a few mutations: Kineto values
swapped for hostile ones (numbers past any width, non-finite tokens, escapes, wrong
types), fields and events removed or duplicated, then sometimes damaged bytes or a
gzip wrapper, or one hostile shape (nesting 600-100,000 deep, integers of 25-5,000
digits, gzip bombs of blanks, ranges past the 26-day limit); nsys cells updated to
other types and ranges, columns renamed, tables dropped or replaced by (recursive)
views, rowids scattered, sometimes damaged pages. Every input goes through ``gaplens
summary``, ``gaps`` and ``smells`` in a child process (``bench.clirun``), killed past
``--timeout`` seconds (a hang) or ``--rss-limit`` MB (a blow-up). A crash is any run
that breaks the command-line contract: an exit status other than 0 or 2, a traceback,
a control character on stdout/stderr, or more than one line with exit 2.

    python -m bench fuzz [--quick]                     20,000 inputs (--quick: 400)
    python -m bench.fuzz --inputs N --seed S --workers W --keep DIR
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gzip
import random
import re
import sqlite3
import tempfile
import threading
import time
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.clirun import CliServer, Result
from bench.corpus import EVIL, OSC52
from bench.seeds import Raw, dumps, kineto_doc, write_nsys

COMMANDS = ("summary", "gaps", "smells")
CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")

HOSTILE: list[object] = [
    0, -1, 1, 7, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, -(2**63),
    Raw(str(2**63)), Raw(str(2**64 - 1)), Raw(str(2**70)), Raw(str(-(2**63) - 1)),
    Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e999000"), Raw("1e1000000"), Raw("-1e400"),
    Raw("1e-400"), Raw("1e308"), Raw("0.5"), Raw("-0.0"), Raw("1E40"), Raw("123456789012345678901234567890.5"),
    Raw("9300000000000000.5"), Raw("100000000000000.0"),
    "", "Infinity", "NaN", "12.5", " 7 ", "stream 7", "0x10", "-5", "1e999000", EVIL, OSC52,
    "[bold red]x[/]", "[link=x]y[/link]", "\ud800", "\udfff\ud800", "\u202eevil", "a" * 5000, "\x00",
    None, True, False, [], {}, [[1, 2], [3]], [1, "a", None], {"a": {"b": []}}, [2**70],
]  # fmt: skip
EVENT_FIELDS = ("ts", "dur", "pid", "tid", "name", "cat", "ph", "args", "id", "s")
ARG_FIELDS = (
    "correlation", "device", "stream", "bytes", "grid", "block", "cuda_sync_kind", "Input Dims",
    "registers per thread", "est. achieved occupancy %", "wait_on_stream", "name",
)  # fmt: skip
TOP_FIELDS = (
    "deviceProperties", "baseTimeNanoseconds", "schemaVersion", "distributedInfo", "traceName",
    "displayTimeUnit", "cuda_runtime_version", "extra key",
)  # fmt: skip
CATS = ("kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "gpu_memset", "cuda_sync", "user_annotation", "overhead")
KEEP = Path(tempfile.gettempdir()) / "gaplens-fuzz-failures"
TOKENS = [b",", b"]", b"}", b"{", b'"', b"\\", b"\x00", b"\xff", b"NaN", b",,", b"\xef\xbb\xbf", b"\x1b[2J"]


# ---- Kineto -------------------------------------------------------------------------------


def _hostile(rng: random.Random) -> object:
    value = rng.choice(HOSTILE)
    return copy.deepcopy(value) if isinstance(value, list | dict) else value


def mutate_kineto(rng: random.Random, seed: dict) -> tuple[bytes, str]:
    """A mutated Kineto document (bytes) and its file suffix."""
    doc = copy.deepcopy(seed)
    events = doc["traceEvents"]
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        ev = rng.choice(events) if events else {}
        if op < 0.35 and isinstance(ev, dict):
            ev[rng.choice(EVENT_FIELDS)] = _hostile(rng)
        elif op < 0.55 and isinstance(ev, dict):
            args = ev.setdefault("args", {}) if isinstance(ev.get("args"), dict) or "args" not in ev else {}
            args[rng.choice(ARG_FIELDS)] = _hostile(rng)
        elif op < 0.65 and isinstance(ev, dict) and ev:
            ev.pop(rng.choice(list(ev)), None)
        elif op < 0.75:
            key = rng.choice(TOP_FIELDS)
            if key == "deviceProperties" and rng.random() < 0.5:
                doc[key] = [{"id": _hostile(rng), "name": _hostile(rng)}]
            else:
                doc[key] = _hostile(rng)
        elif op < 0.82 and events:
            events.insert(rng.randrange(len(events) + 1), copy.deepcopy(rng.choice(events)))
        elif op < 0.88 and events:
            del events[rng.randrange(len(events))]
        elif op < 0.94 and isinstance(ev, dict):
            ev["cat"] = rng.choice(CATS)
        else:
            events.insert(rng.randrange(len(events) + 1), _hostile(rng))
    data = dumps(doc)
    if rng.random() < SHAPES:
        return _shape(rng, doc)
    if rng.random() < 0.25:
        data = _damage_bytes(rng, data)
    if rng.random() < 0.15:
        data = _gzip(rng, data)
        return data, ".json.gz"
    return data, ".json"


# ---- hostile shapes: each must end, bounded (issue 22) --------------------------------------

SHAPES = 0.12  # share of Kineto inputs given one of the shapes below instead of byte damage
DEPTHS = (600, 1_100, 10_000, 100_000)
DIGITS = (25, 401, 4_300, 5_000)  # past 4,300 digits Python refuses to read an int at all
BOMB_MB = (4, 16, 48)  # blank megabytes: small enough to keep a 20,000-input run affordable
_DAY_US = 86_400_000_000


def _deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


def _events_text(doc: dict) -> bytes:
    return b",".join(dumps(ev) for ev in doc["traceEvents"])


def _shape(rng: random.Random, doc: dict) -> tuple[bytes, str]:
    """The document with one hostile shape: deep nesting (top-level key, event arg, Input Dims), an integer of
    hundreds or thousands of digits, a gzip bomb of blanks (between events, before or after them) or ranges
    longer than the trace's 26-day limit."""
    op = rng.random()
    events = [ev for ev in doc["traceEvents"] if isinstance(ev, dict)]
    body = _events_text(doc)
    if op < 0.3:
        deep = _deep(rng.choice(DEPTHS))
        where = rng.random()
        if where < 0.4:
            data = b'{"x": ' + deep + b', "traceEvents": [' + body + b"]}"
        elif where < 0.6:
            data = b'{"traceEvents": [' + body + b'], "x": ' + deep + b"}"
        else:
            ev = dumps(rng.choice(events))[:-1] if events else b'{"ph": "X"'
            key = b'"Input Dims"' if where < 0.8 else b'"extra"'
            data = b'{"traceEvents": [' + body + b", " + ev + b', "args": {' + key + b": " + deep + b"}}]}"
        return data, ".json"
    if op < 0.5:
        digits = ("9" * rng.choice(DIGITS)).encode()
        key = rng.choice([b'"registers per thread"', b'"grid"', b'"correlation"', b'"stream"', b'"bytes"'])
        ev = dumps(rng.choice(events))[:-1] if events else b'{"ph": "X", "cat": "kernel"'
        data = b'{"traceEvents": [' + body + b", " + ev + b', "args": {' + key + b": " + digits + b"}}]}"
        return data, ".json"
    if op < 0.75:
        blank = rng.choice([b" ", b"\n", b" \t\r\n"])
        size = rng.choice(BOMB_MB) << 20
        where = rng.random()
        first, rest = (dumps(events[0]), b",".join(dumps(ev) for ev in events[1:])) if events else (b"", b"")
        if where < 0.5 and first and rest:
            head, tail = b'{"traceEvents": [' + first + b",", rest + b"]}"
        elif where < 0.75:
            head, tail = b'{"schemaVersion": 1,', b'"traceEvents": [' + body + b"]}"
        else:
            head, tail = b'{"traceEvents": [' + body + b"],", b'"schemaVersion": 1}'
        z = zlib.compressobj(6, zlib.DEFLATED, 31)
        block = blank * ((1 << 20) // len(blank))
        parts = [z.compress(head), *(z.compress(block) for _ in range(size >> 20)), z.compress(tail), z.flush()]
        return b"".join(parts), ".json.gz"
    ranges = []
    n = rng.choice((50, 500, 3_000))
    base: dict = {"ph": "X", "pid": 1, "tid": 1, "ts": 1000}
    for event in events:
        if event.get("ph") == "X" and isinstance(event.get("ts"), int | float):
            base = event
            break
    for i in range(n):
        ranges.append(
            {**base, "cat": "user_annotation", "name": f"r{i}", "ts": i, "dur": rng.choice((27, 40, 10**6)) * _DAY_US}
        )
    doc["traceEvents"] = list(doc["traceEvents"]) + ranges
    return dumps(doc), ".json"


def _damage_bytes(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    op = rng.random()
    if op < 0.3 and buf:
        return bytes(buf[: rng.randrange(len(buf))])
    if op < 0.55:
        for _ in range(rng.randint(1, 5)):
            if buf:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        return bytes(buf)
    if op < 0.85:
        at = rng.randrange(len(buf) + 1)
        return bytes(buf[:at]) + rng.choice(TOKENS) + bytes(buf[at:])
    a = rng.randrange(len(buf) + 1)
    b = min(len(buf), a + rng.randint(1, 400))
    return bytes(buf[:b]) + bytes(buf[a:b]) + bytes(buf[b:])


def _gzip(rng: random.Random, data: bytes) -> bytes:
    z = gzip.compress(data, compresslevel=1, mtime=0)
    op = rng.random()
    if op < 0.3:
        z += bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
    elif op < 0.5:
        z = z[: rng.randrange(10, max(11, len(z)))]
    return z


# ---- nsys ---------------------------------------------------------------------------------

SQL_VALUES: list[object] = [
    0, -1, 2**31, 2**32 - 1, 2**40, 2**62, 2**63 - 1, -(2**63), 1.5, 2.0, -0.5, float("inf"), float("-inf"), 1e300,
    "", "abc", "12", " 7 ", "1e5", "9" * 25, EVIL, OSC52, "[bold]x[/]", b"\x00\x01", b"12", None,
]  # fmt: skip


def _tables(con: sqlite3.Connection) -> dict[str, list[str]]:
    names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: [r[1] for r in con.execute(f'PRAGMA table_info("{t}")')] for t in names}


def mutate_nsys(rng: random.Random, seed: bytes, path: Path) -> Path:
    """Write a mutated copy of the nsys seed to ``path`` (maybe gzipped: the returned path)."""
    path.write_bytes(seed)
    con = sqlite3.connect(path)
    try:
        tables = {t: c for t, c in _tables(con).items() if c}
        for _ in range(rng.randint(1, 3)):
            table = rng.choice(list(tables))
            cols = tables[table]
            op = rng.random()
            try:
                if op < 0.5:
                    value = rng.choice(SQL_VALUES)
                    col = rng.choice(cols)
                    if isinstance(value, str) and rng.random() < 0.2:
                        sql = f'UPDATE "{table}" SET "{col}" = CAST(X\'6162FFFE1B5D30\' AS TEXT)'
                        con.execute(sql)
                    elif rng.random() < 0.5:
                        where = f'rowid = (SELECT rowid FROM "{table}" ORDER BY random() LIMIT 1)'
                        con.execute(f'UPDATE "{table}" SET "{col}" = ? WHERE {where}', (value,))
                    else:
                        con.execute(f'UPDATE "{table}" SET "{col}" = ?', (value,))
                elif op < 0.6:
                    scale = rng.choice(["rowid * 1000000000000", "-rowid", "rowid + 9223372036854775000"])
                    con.execute(f'UPDATE "{table}" SET rowid = {scale}')
                elif op < 0.7:
                    col = rng.choice(cols)
                    con.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{col}" TO "x_{col}"')
                    tables[table] = [f"x_{c}" if c == col else c for c in cols]
                elif op < 0.78:
                    con.execute(f'DROP TABLE "{table}"')
                    del tables[table]
                    if not tables:
                        break
                elif op < 0.86:
                    con.execute(f'DELETE FROM "{table}" WHERE abs(random()) % 2 = 0')
                elif op < 0.93:
                    con.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}"')
                elif op < 0.96:
                    _view_for(con, table, tables[table], recursive=rng.random() < 0.7)
                    del tables[table]
                    if not tables:
                        break
                else:
                    name, value = rng.choice(
                        [
                            ("EXPORT_PRODUCT_VERSION", EVIL),
                            ("EXPORT_PARAM_TIME_SHIFT", "soon"),
                            ("EXPORT_PARAM_TIME_NORMALIZE", "TRUE"),
                            ("EXPORT_SCHEMA_VERSION", "3.20.3\n" + OSC52),
                        ]
                    )
                    con.execute("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", (name, value))
            except sqlite3.Error:
                pass  # a constraint said no: the next mutation may
        con.commit()
    finally:
        con.close()
    if rng.random() < 0.1:
        raw = bytearray(path.read_bytes())
        if rng.random() < 0.5:
            raw = raw[: rng.randrange(100, max(101, len(raw)))]
        else:
            at = rng.randrange(100, max(101, len(raw)))
            for k in range(at, min(len(raw), at + rng.randint(1, 2000))):
                raw[k] = rng.randrange(256)
        path.write_bytes(bytes(raw))
    if rng.random() < 0.08:
        gz = path.with_name(path.name + ".gz")
        gz.write_bytes(_gzip(rng, path.read_bytes()))
        path.unlink()
        return gz
    return path


def _view_for(con: sqlite3.Connection, table: str, cols: list[str], recursive: bool) -> None:
    """Replace ``table`` by a view of the same columns: recursive ones yield rows without end."""
    names = ", ".join(f'"{c}"' for c in cols)
    con.execute(f'ALTER TABLE "{table}" RENAME TO "{table}_was"')
    if recursive:
        step = ", ".join(f'"{c}" + 1' for c in cols)
        con.execute(
            f'CREATE VIEW "{table}" AS WITH RECURSIVE r({names}) AS '
            f'(SELECT {names} FROM "{table}_was" UNION ALL SELECT {step} FROM r) SELECT * FROM r'
        )
    else:
        con.execute(f'CREATE VIEW "{table}" AS SELECT {names} FROM "{table}_was"')


# ---- running ------------------------------------------------------------------------------


def contract_problems(r: Result) -> list[str]:
    """Breaks of the command-line contract in one run (hangs and blow-ups are counted apart)."""
    if r.timed_out or r.over_memory or r.rc is None:
        return []
    out = []
    if r.rc not in (0, 2):
        tail = r.err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["(no stderr)"]
        out.append(f"exit {r.rc}: {tail[0][:160]}")
    if b"Traceback" in r.out + r.err:
        out.append("traceback")
    if CONTROL.search(r.out) or CONTROL.search(r.err):
        out.append("control character on stdout/stderr")
    lines = r.err.decode("utf-8", "replace").splitlines()
    if r.rc == 2 and len(lines) != 1:
        out.append(f"exit 2 with {len(lines)} stderr lines")
    if r.rc == 0 and not all(line.startswith("gaplens: warning: ") for line in lines):
        out.append("exit 0 with stderr that is not warnings")
    return out


@dataclass
class Tally:
    """What a fuzz run found."""

    inputs: int = 0
    runs: int = 0
    crashes: Counter = field(default_factory=Counter)  # signature -> count
    examples: dict[str, str] = field(default_factory=dict)  # signature -> kept input
    hangs: int = 0
    blowups: int = 0
    outcomes: Counter = field(default_factory=Counter)  # (format, "0", "0+warning", "2")
    peak_rss_mb: float = 0.0
    slowest_s: float = 0.0
    biggest_input: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def fuzz(
    inputs: int,
    seed: int = 1,
    workers: int = 2,
    timeout_s: float = 10.0,
    rss_limit_mb: float = 2048.0,
    keep: Path | None = None,
    progress: bool = True,
) -> tuple[Tally, float]:
    """Run ``inputs`` mutated inputs; returns the tally and the servers' baseline RSS (MB)."""
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="gaplens-fuzz-") as tmp:
        work = Path(tmp)
        nsys_seed = write_nsys(work / "seed.sqlite").read_bytes()
        kineto_seed = kineto_doc()
        from tests.xplane_bytes import synthetic

        xplane_seed = synthetic(200, streams=2)
        env = {"GAPLENS_CACHE_DIR": str(work / "cache"), "GAPLENS_STATE_DIR": str(work / "state")}
        servers = [CliServer(env) for _ in range(workers)]
        base = max(s.base_rss_mb for s in servers)
        try:

            def worker(k: int) -> None:
                server = servers[k]
                for i in range(k, inputs, workers):
                    rng = random.Random(seed * 1_000_003 + i)
                    pick = rng.random()
                    if pick < 0.15:  # an XSpace protobuf, its bytes damaged (truncated, flipped, spliced)
                        fmt = "xplane"
                        data = xplane_seed
                        for _ in range(rng.randint(1, 3)):
                            data = _damage_bytes(rng, data)
                        path = work / f"in{i}.xplane.pb"
                        path.write_bytes(_gzip(rng, data) if rng.random() < 0.2 else data)
                    elif pick < 0.55:
                        fmt = "kineto"
                        data, suffix = mutate_kineto(rng, kineto_seed)
                        path = work / f"in{i}{suffix}"
                        path.write_bytes(data)
                    else:
                        fmt = "nsys"
                        path = mutate_nsys(rng, nsys_seed, work / f"in{i}.sqlite")
                    size = path.stat().st_size
                    results = server.run_many([[c, str(path)] for c in COMMANDS], 3 * timeout_s, rss_limit_mb)
                    _record(tally, fmt, path, size, results, timeout_s, keep)
                    path.unlink()
                    if i % 200 == k:  # the trace cache grows by one entry per input
                        for old in (work / "cache" / "traces").glob("*"):
                            with contextlib.suppress(OSError):  # the other worker's child may be writing it
                                old.unlink()
                    if progress and i % 1000 == 0 and i:
                        print(
                            f"  {i:,} inputs, {sum(tally.crashes.values())} crashes, {tally.hangs} hangs,"
                            f" {tally.blowups} blow-ups, peak RSS {tally.peak_rss_mb:,.0f} MB",
                            flush=True,
                        )

            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(worker, range(workers)))
        finally:
            for s in servers:
                s.close()
        return tally, base


def _record(
    tally: Tally, fmt: str, path: Path, size: int, results: list[Result], timeout_s: float, keep: Path | None
) -> None:
    with tally.lock:
        tally.inputs += 1
        tally.runs += len(results)
        tally.biggest_input = max(tally.biggest_input, size)
        tally.peak_rss_mb = max(tally.peak_rss_mb, results[0].peak_rss_mb)
        hang = any(r.timed_out for r in results) or any(r.rc is not None and r.wall_s > timeout_s for r in results)
        tally.hangs += hang
        tally.blowups += any(r.over_memory for r in results)
        tally.slowest_s = max([tally.slowest_s, *(r.wall_s for r in results if r.rc is not None)])
        for r in results:
            if r.rc is not None:
                kind = "2" if r.rc == 2 else ("0+warning" if r.rc == 0 and r.err else str(r.rc))
                tally.outcomes[(fmt, kind)] += 1
            for problem in contract_problems(r):
                sig = f"{fmt} {r.argv[0]}: {problem}"
                tally.crashes[sig] += 1
                if keep is not None and sig not in tally.examples:
                    keep.mkdir(parents=True, exist_ok=True)
                    kept = keep / f"crash{len(tally.examples)}{''.join(path.suffixes)}"
                    kept.write_bytes(path.read_bytes())
                    tally.examples[sig] = str(kept)
        if hang and keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"hang{tally.hangs}{''.join(path.suffixes)}").write_bytes(path.read_bytes())


def report(tally: Tally, base_rss_mb: float, seconds: float) -> list[str]:
    crashes = sum(tally.crashes.values())
    lines = [
        f"inputs {tally.inputs:,} ({tally.runs:,} command runs) in {seconds:,.0f} s",
        f"crashes {crashes}   hangs {tally.hangs}   memory blow-ups {tally.blowups}",
        f"peak RSS of one run {tally.peak_rss_mb:,.0f} MB (server baseline {base_rss_mb:,.0f} MB,"
        f" largest input {tally.biggest_input / 1024:,.0f} KiB); slowest run {tally.slowest_s:.2f} s",
        "outcomes: " + ", ".join(f"{fmt} exit {kind}: {n:,}" for (fmt, kind), n in sorted(tally.outcomes.items())),
    ]
    for sig, n in tally.crashes.most_common(20):
        lines.append(f"  {n:>5} × {sig}" + (f"  (kept: {tally.examples[sig]})" if sig in tally.examples else ""))
    return lines


def run(args: argparse.Namespace) -> None:
    """The ``python -m bench fuzz`` section."""
    inputs = 400 if getattr(args, "quick", False) else 20_000
    t0 = time.perf_counter()
    tally, base = fuzz(inputs, keep=KEEP)
    for line in report(tally, base, time.perf_counter() - t0):
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per command before it is a hang")
    parser.add_argument("--rss-limit", type=float, default=2048.0, help="MB of RSS before a run is a blow-up")
    parser.add_argument("--keep", type=Path, default=KEEP, help=f"where failing inputs are copied ({KEEP})")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    tally, base = fuzz(args.inputs, args.seed, args.workers, args.timeout, args.rss_limit, args.keep)
    for line in report(tally, base, time.perf_counter() - t0):
        print(line)
    return 1 if tally.crashes or tally.hangs or tally.blowups else 0


if __name__ == "__main__":
    raise SystemExit(main())
