"""The bad-input corpus: damaged and hostile traces of both formats, written into a folder from code.

Each case is one file built from the seeds (``bench.seeds``) with one kind of damage,
so git holds this script, not the files. The classes follow issue 10: values Arrow or
numpy cannot hold (ints past 64 bits, NaN, Infinity, huge exponents), shapes the
loaders did not expect, escape sequences in every text field, damaged containers,
special files, and nsys tables with the wrong types, ranges, rowids and schemas.

    python -m bench.corpus OUT_DIR        writes the corpus and lists it
"""

from __future__ import annotations

import argparse
import copy
import gzip
import os
import shutil
import socket
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.seeds import Raw, dumps, kineto_doc, write_nsys

EVIL = "\x1b]0;x\x07\x1b[2J[link=x]evil[/link]\x9b31m"  # title change, screen clear, markup, 8-bit CSI
OSC52 = "\x1b]52;c;b3duZWQ=\x07"  # a clipboard write


# ---- Kineto --------------------------------------------------------------------------


def _events(doc: dict, cat: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == cat]


def _set(cat: str, key: str, value: object, n: int = 1) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        for ev in _events(doc, cat)[:n]:
            ev[key] = value

    return edit


def _set_arg(cat: str, key: str, value: object) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        _events(doc, cat)[0].setdefault("args", {})[key] = value

    return edit


def _top(key: str, value: object) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        doc[key] = value

    return edit


def _no_args(doc: dict) -> None:
    doc["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1})
    for ev in _events(doc, "kernel")[:3]:
        ev.pop("args", None)


def _evil_everywhere(doc: dict) -> None:
    """Every string the loader reads carries escapes and markup."""
    for ev in doc["traceEvents"]:
        if "name" in ev and ev.get("ph") == "X":
            ev["name"] = f"{EVIL}{ev['name']}"
        if ev.get("ph") == "M":
            ev["args"] = {k: f"{EVIL}{v}" if isinstance(v, str) else v for k, v in ev.get("args", {}).items()}
        if ev.get("cat") == "cuda_sync":
            ev["args"]["cuda_sync_kind"] = EVIL
    doc["deviceProperties"][0]["name"] = f"{OSC52}NVIDIA {EVIL}"
    doc["schemaVersion"] = f"1{EVIL}\nsecond line"
    doc["distributedInfo"] = {"backend": EVIL, "rank": 0, EVIL: EVIL}
    doc[f"key{EVIL}"] = f"value{OSC52}"
    doc["cuda_runtime_version"] = f"12.9{EVIL}"


def _surrogate(doc: dict) -> None:
    _events(doc, "kernel")[0]["name"] = "kernel\ud800lone"
    _events(doc, "cpu_op")[0]["name"] = "\udfffop"


def _bidi(doc: dict) -> None:
    _events(doc, "kernel")[0]["name"] = "gemm\u202eevil\u2066x\u2069"


def _huge_name(doc: dict) -> None:
    _events(doc, "kernel")[0]["name"] = "k" * 2_000_000


def _deep_args(doc: dict) -> None:
    """Nesting deeper than a recursive parser's stack."""
    _events(doc, "cpu_op")[0]["args"] = {"Input Dims": Raw("[" * 100_000 + "1" + "]" * 100_000)}


def _span(doc: dict) -> None:
    """One event decades away from the rest: the trace's span must not overflow a reading."""
    ev = copy.deepcopy(_events(doc, "kernel")[0])
    ev["ts"] = Raw("4000000000000000.0")  # ~127 years after the base
    doc["traceEvents"].append(ev)


def _span_years(doc: dict) -> None:
    """One event three years after the rest: inside int64, but a span no trace has."""
    ev = copy.deepcopy(_events(doc, "kernel")[0])
    ev["ts"] = Raw("100000000000000.0")
    doc["traceEvents"].append(ev)


def _wrap(doc: dict) -> None:
    """µs that become more ns than int64 holds: must be refused, not wrapped to a negative time."""
    _events(doc, "kernel")[0]["ts"] = Raw("9300000000000000.5")
    _events(doc, "kernel")[1]["dur"] = Raw("9300000000000000")


def _mixed(doc: dict) -> None:
    for ev in _events(doc, "kernel")[:4]:
        ev["tid"] = "stream 7"
        ev["pid"] = "0"
    _events(doc, "cpu_op")[0]["pid"] = "python3 worker"
    _events(doc, "kernel")[5]["args"]["stream"] = "0x7"


def _odd_events(doc: dict) -> None:
    doc["traceEvents"][5:5] = [5, "x", None, [], {"ph": 7, "cat": {}, "name": ["a"]}, {"ph": "X", "cat": "kernel"}]


def _nulls(doc: dict) -> None:
    for key in ("ts", "dur", "pid", "tid", "name", "cat", "args"):
        _events(doc, "kernel")[["ts", "dur", "pid", "tid", "name", "cat", "args"].index(key)][key] = None


def _negative(doc: dict) -> None:
    for ev in _events(doc, "kernel")[:2]:
        ev["ts"] = Raw("-5.5")
    _events(doc, "cpu_op")[0]["dur"] = -40


def _no_duration_events(doc: dict) -> None:
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M"]


def _text(doc: dict, edit: Callable[[str], str]) -> bytes:
    return edit(dumps(doc).decode("utf-8", "surrogatepass")).encode("utf-8", "surrogatepass")


KINETO: dict[str, Callable[[dict], object]] = {
    "kernel_without_args": _no_args,
    "corr_2_64": _set_arg("kernel", "correlation", Raw(str(2**64 - 1))),
    "pid_2_70": _set("cpu_op", "pid", Raw(str(2**70))),
    "tid_2_70_string": _set("cpu_op", "tid", str(2**70)),
    "device_2_40": _set("kernel", "pid", 2**40),
    "stream_past_int64": _set_arg("kernel", "stream", Raw(str(2**63))),
    "bytes_negative": _set_arg("gpu_memcpy", "bytes", -(2**62)),
    "ts_1e40": _set("kernel", "ts", Raw("1e40")),
    "ts_nan": _set("kernel", "ts", Raw("NaN")),
    "ts_infinity": _set("kernel", "ts", Raw("Infinity")),
    "ts_minus_infinity": _set("cpu_op", "ts", Raw("-Infinity")),
    "ts_string_infinity": _set("kernel", "ts", "Infinity"),
    "ts_1e1000000": _set("kernel", "ts", Raw("1e1000000")),
    "ts_1e999000_costly": _set("kernel", "ts", Raw("1e999000")),
    "ts_long_digits": _set("kernel", "ts", Raw("1" * 4000)),
    "ts_numeric_string": _set("kernel", "ts", "1000.5"),
    "ts_bool": _set("kernel", "ts", True),
    "dur_nan": _set("kernel", "dur", Raw("NaN"), 3),
    "dur_negative": _set("kernel", "dur", -5, 3),
    "dur_huge": _set("cpu_op", "dur", Raw("9000000000000000")),
    "dur_missing": lambda d: [ev.pop("dur") for ev in _events(d, "kernel")[:2]],
    "ns_overflow_wraps": _wrap,
    "span_of_centuries": _span,
    "span_of_years": _span_years,
    "negative_ts": _negative,
    "device_properties_5": _top("deviceProperties", 5),
    "device_properties_bad_ids": _top("deviceProperties", [{"id": "x"}, {"name": "no id"}, 3, {"id": 2**70}]),
    "base_time_2_70": _top("baseTimeNanoseconds", Raw(str(2**70))),
    "base_time_text": _top("baseTimeNanoseconds", "soon"),
    "base_time_nan": _top("baseTimeNanoseconds", Raw("NaN")),
    "distributed_info_list": _top("distributedInfo", [1, 2]),
    "escapes_everywhere": _evil_everywhere,
    "markup_names": _set("kernel", "name", "[bold red]red[/] [link=https://x]link[/link]", 12),
    "lone_surrogates": _surrogate,
    "bidi_overrides": _bidi,
    "huge_name": _huge_name,
    "deep_args": _deep_args,
    "mixed_pid_tid_types": _mixed,
    "non_object_events": _odd_events,
    "null_fields": _nulls,
    "no_duration_events": _no_duration_events,
    "empty_trace_events": _top("traceEvents", []),
    "trace_events_object": _top("traceEvents", {"a": 1}),
}

# Damage to the bytes of the seed document.
KINETO_BYTES: dict[str, Callable[[bytes], bytes]] = {
    "utf8_bom": lambda b: b"\xef\xbb\xbf" + b,
    "invalid_utf8_names": lambda b: b.replace(b'"sm90_gemm_0"', b'"sm90_\xff\xfe\xc3gemm"'),
    "double_comma": lambda b: b.replace(b"}, {", b"},, {", 1),
    "double_comma_late": lambda b: b.replace(b"}, {", b"},, {", 40).replace(b"},, {", b"}, {", 39),
    "truncated_json": lambda b: b[: len(b) * 2 // 3],
    "truncated_in_string": lambda b: b[: b.index(b"sm90_gemm_2") + 4],
    "trailing_garbage": lambda b: b + b"\x00\xffgarbage",
    "nul_bytes": lambda b: b.replace(b"aten::mm", b"aten\x00mm"),
    "not_json": lambda b: b"this is not a trace\n",
    "empty_file": lambda b: b"",
    "whitespace_only": lambda b: b"   \n\t ",
    "no_trace_events_key": lambda b: b'{"schemaVersion": 1, "events": []}',
    "bare_array": lambda b: b[b.index(b"[", b.index(b'"traceEvents"')) : b.rindex(b"]") + 1],
    "gzip": gzip.compress,
    "gzip_then_junk": lambda b: gzip.compress(b) + b"junk after the member\x1b[2J",
    "gzip_truncated": lambda b: gzip.compress(b)[:-200],
    "gzip_corrupt": lambda b: (lambda z: z[:12] + bytes(x ^ 0x5A for x in z[12:400]) + z[400:])(gzip.compress(b)),
    "gzip_of_nothing": lambda b: gzip.compress(b""),
    "two_gzip_members": lambda b: gzip.compress(b[: len(b) // 2]) + gzip.compress(b[len(b) // 2 :]),
}


# ---- nsys ----------------------------------------------------------------------------

K, R, N = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"
M = "CUPTI_ACTIVITY_KIND_MEMCPY"


def _loosen(con: sqlite3.Connection, table: str) -> None:
    """Recreate ``table`` without types or NOT NULL, so any value (and NULL) can be stored as is."""
    cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
    con.execute(f'ALTER TABLE "{table}" RENAME TO "{table}_old"')
    con.execute(f'CREATE TABLE "{table}" ({", ".join(f"{c!r}".replace(chr(39), chr(34)) for c in cols)})')
    con.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}_old"')
    con.execute(f'DROP TABLE "{table}_old"')


def _first(table: str, column: str, value: object) -> tuple[str, tuple]:
    return (f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = (SELECT min(rowid) FROM "{table}")', (value,))


def _all(table: str, column: str, value: object) -> tuple[str, tuple]:
    return (f'UPDATE "{table}" SET "{column}" = ?', (value,))


def _bad_schema_text(con: sqlite3.Connection) -> None:
    sql = con.execute("SELECT sql FROM sqlite_master WHERE name = 'TARGET_INFO_GPU'").fetchone()[0]
    con.execute("PRAGMA writable_schema = ON")
    bad = sql.encode() + b"\n-- \xff\xfe\x1b]0;x\x07 not UTF-8"
    con.execute("UPDATE sqlite_master SET sql = CAST(? AS TEXT) WHERE name = 'TARGET_INFO_GPU'", (bad,))
    con.execute("PRAGMA writable_schema = OFF")


NSYS: dict[str, tuple[tuple[str, ...], list]] = {
    # name: (tables to loosen first, statements or callables)
    "text_in_global_tid": ((), [_all(R, "globalTid", "thread one")]),
    "text_in_string_ids_id": (("StringIds",), [_first("StringIds", "id", "seven")]),
    "text_in_gpu_id": ((), [_all("TARGET_INFO_GPU", "id", "gpu zero")]),
    "float_in_kernel_times": ((), [_first(K, "start", 1.5e9), _first(K, "end", float("inf"))]),
    "blob_in_kernel_columns": ((), [_all(K, "streamId", b"\x00\x01"), _first(K, "gridX", b"12")]),
    "text_everywhere_nvtx": ((N,), [_all(N, c, "x") for c in ("end", "globalTid", "textId", "domainId")]),
    "text_time_shift": ((), [("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_TIME_SHIFT', 'later')", ())]),
    "text_utc_epoch": ((), [_all("TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "yesterday")]),
    "device_id_2_40": ((), [_all(K, "deviceId", 2**40)]),
    "device_id_negative": ((), [_first(K, "deviceId", -3)]),
    "stream_id_huge": ((), [_first(K, "streamId", 2**62)]),
    "correlation_huge": ((), [_all(K, "correlationId", 2**62), _first(R, "correlationId", -(2**63))]),
    "grid_block_huge": ((), [_all(K, "gridX", 2**62), _all(K, "blockY", -5), _all(K, "registersPerThread", 10**6)]),
    "memcpy_weird": (
        (),
        [
            _all("CUPTI_ACTIVITY_KIND_MEMCPY", "bytes", -(2**63)),
            _first("CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind", "htod"),
        ],
    ),
    "events_span_past_int64": ((), [_first(K, "start", -(2**63) + 1), _first(K, "end", 2**63 - 1)]),
    "end_before_start": ((), [(f'UPDATE "{K}" SET "end" = "start" - 1000000000', ())]),
    "null_starts": ((K,), [_all(K, "start", None), _all(K, "end", None)]),
    "renamed_start_column": ((), [(f'ALTER TABLE "{K}" RENAME COLUMN "start" TO "begin"', ())]),
    "renamed_nvtx_type": ((), [(f'ALTER TABLE "{N}" RENAME COLUMN "eventType" TO "kind"', ())]),
    "sparse_rowids": ((), [(f'UPDATE "{K}" SET rowid = rowid * 1000000000000', ())]),
    "negative_extreme_rowids": (
        (),
        [
            (f'UPDATE "{R}" SET rowid = -rowid', ()),
            (f'UPDATE "{K}" SET rowid = 9223372036854775807 WHERE rowid = (SELECT max(rowid) FROM "{K}")', ()),
            (f'UPDATE "{K}" SET rowid = -9223372036854775808 WHERE rowid = (SELECT min(rowid) FROM "{K}")', ()),
        ],
    ),
    "escapes_in_names": (
        (),
        [
            (f"UPDATE StringIds SET value = '{EVIL}' || value", ()),
            _all("TARGET_INFO_GPU", "name", f"{OSC52}H200{EVIL}"),
            (f"UPDATE META_DATA_EXPORT SET value = '{EVIL}\n2025' WHERE name = 'EXPORT_PRODUCT_VERSION'", ()),
            (f"UPDATE PROCESSES SET name = '{EVIL}'", ()),
            (f"UPDATE NVTX_EVENTS SET text = '{EVIL}' || text", ()),
        ],
    ),
    "non_utf8_text": (
        (),
        [
            ("UPDATE StringIds SET value = CAST(X'6B65726E656CFFFE1B5D303B78' AS TEXT)", ()),
            ("UPDATE TARGET_INFO_GPU SET name = CAST(X'48323030FF' AS TEXT)", ()),
        ],
    ),
    "non_utf8_schema_sql": ((), [_bad_schema_text]),
    "quoted_column_name": ((), [('ALTER TABLE TARGET_INFO_GPU ADD COLUMN "a""b" TEXT', ())]),
    "only_string_ids": (
        (),
        [(f'DROP TABLE "{t}"', ()) for t in (K, R, N, M)],
    ),
    "empty_tables": ((), [(f'DELETE FROM "{t}"', ()) for t in (K, R, N, M)]),
    "normalize_odd": ((), [("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_TIME_NORMALIZE', ' TRUE ')", ())]),
}

NSYS_BYTES: dict[str, Callable[[bytes], bytes]] = {
    "sqlite_truncated": lambda b: b[: len(b) // 3],
    "sqlite_header_only": lambda b: b[:100],
    "sqlite_corrupt_pages": lambda b: b[:4096] + bytes(x ^ 0xA5 for x in b[4096:12288]) + b[12288:],
    # The schema text itself damaged: SQLite's error message then quotes bytes that are not UTF-8.
    "sqlite_schema_not_utf8": lambda b: b.replace(
        b"CREATE TABLE StringIds (", b"CREATE TABLE StringIds \x93\xdd\xea", 1
    ),
    "sqlite_gzip_then_junk": lambda b: gzip.compress(b) + b"\x1b]0;junk\x07",
    "sqlite_gzip_truncated": lambda b: gzip.compress(b)[:5000],
}


def _not_nsys(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.execute("INSERT INTO t VALUES (1)")
    con.commit()
    con.close()


# ---- special files ---------------------------------------------------------------------


def _special(folder: Path) -> list[Path]:
    out = []
    fifo = folder / "special_fifo.json"
    if hasattr(os, "mkfifo"):
        os.mkfifo(fifo)
        out.append(fifo)
    if os.path.exists("/dev/zero"):
        dev = folder / "special_device.json"
        dev.symlink_to("/dev/zero")
        out.append(dev)
    if hasattr(socket, "AF_UNIX"):
        sock_path = folder / "special_socket.json"
        # A short path: AF_UNIX names are limited to ~100 bytes.
        with tempfile.TemporaryDirectory() as short:
            s = socket.socket(socket.AF_UNIX)
            try:
                s.bind(os.path.join(short, "s"))
                os.rename(os.path.join(short, "s"), sock_path)
                out.append(sock_path)
            except OSError:
                pass
            finally:
                s.close()
    folder_case = folder / "special_directory.json"
    folder_case.mkdir()
    out.append(folder_case)
    rep = folder / "special_report.nsys-rep"
    rep.write_bytes(b"not a report")
    out.append(rep)
    return out


# ---- the corpus ------------------------------------------------------------------------


def generate(folder: str | Path) -> list[Path]:
    """Write every case into ``folder`` (created); returns the paths, Kineto cases first."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out: list[Path] = []
    seed = kineto_doc()
    seed_bytes = dumps(seed)
    for name, edit in KINETO.items():
        doc = copy.deepcopy(seed)
        edit(doc)
        path = folder / f"kineto_{name}.json"
        path.write_bytes(dumps(doc))
        out.append(path)
    for name, damage in KINETO_BYTES.items():
        path = folder / f"kineto_{name}.json{'.gz' if 'gzip' in name else ''}"
        path.write_bytes(damage(seed_bytes))
        out.append(path)
    for name in (f"kineto_{EVIL.replace('/', '_')}name.json", os.fsdecode(b"kineto_\xff\xfe_not_utf8_name.json")):
        path = folder / name  # file names are the user's, but may hold anything
        path.write_bytes(seed_bytes)
        out.append(path)

    base = write_nsys(folder / "nsys_seed.sqlite")
    out.append(base)
    for name, (loosen, steps) in NSYS.items():
        path = folder / f"nsys_{name}.sqlite"
        shutil.copyfile(base, path)
        con = sqlite3.connect(path)
        try:
            for table in loosen:
                _loosen(con, table)
            for step in steps:
                if callable(step):
                    step(con)
                else:
                    con.execute(*step)
            con.commit()
        finally:
            con.close()
        out.append(path)
    raw = base.read_bytes()
    for name, damage in NSYS_BYTES.items():
        path = folder / f"nsys_{name}.sqlite{'.gz' if 'gzip' in name else ''}"
        path.write_bytes(damage(raw))
        out.append(path)
    not_nsys = folder / "nsys_not_an_export.sqlite"
    _not_nsys(not_nsys)
    out.append(not_nsys)
    out += _special(folder)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.corpus", description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to write the corpus into")
    args = parser.parse_args(argv)
    paths = generate(args.out)
    for p in paths:
        print(ascii(p.name))
    print(f"{len(paths)} files in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
