"""`gaplens export`: the trace and gaplens's readings for other tools (Perfetto, pandas, spreadsheets).

    gaplens export TRACE --perfetto OUT.json[.gz]   Chrome-trace JSON: the trace + gaplens tracks
    gaplens export TRACE --csv DIR                 DIR/events.csv, DIR/gaps.csv
    gaplens export TRACE --parquet DIR             DIR/events.parquet, DIR/gaps.parquet

Every file is written atomically (temp file, then rename): a reader sees the old file or the new one.
Every output is checked before the trace is loaded (``common.output_file``): the input itself, a symlink,
or something that is not a regular file (a folder that is not a folder) is refused with exit 2.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import pyarrow as pa

from gaplens.analysis.units import fmt_bytes
from gaplens.loaders.model import Trace, TraceError
from gaplens.tui.commands.common import load_trace, output_file, output_folder, write_output

#: The tables ``--csv`` and ``--parquet`` write (``tables``), one file each.
TABLES = ("events", "gaps")


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="write the trace and gaplens's tracks for Perfetto, or tables as CSV / Parquet")
    p.add_argument("trace")
    p.add_argument("--perfetto", metavar="OUT.json", help="Chrome-trace JSON (.json.gz compresses) for Perfetto")
    p.add_argument("--csv", metavar="DIR", help="events.csv and gaps.csv in DIR")
    p.add_argument("--parquet", metavar="DIR", help="events.parquet and gaps.parquet in DIR")


def run(args: argparse.Namespace) -> int:
    if not (args.perfetto or args.csv or args.parquet):
        raise TraceError("export: say what to write: --perfetto OUT.json, --csv DIR and/or --parquet DIR")
    perfetto = output_file(args.perfetto, [args.trace], "export --perfetto") if args.perfetto else None
    folders = {
        fmt: output_folder(getattr(args, fmt), [f"{t}.{fmt}" for t in TABLES], [args.trace], f"export --{fmt}")
        for fmt in ("csv", "parquet")
        if getattr(args, fmt)
    }
    trace = load_trace(args.trace)
    written: list[Path] = []
    if perfetto is not None:
        written.append(write_perfetto(trace, perfetto))
    for fmt, folder in folders.items():
        written.extend(write_tables(trace, folder, fmt))
    for path in written:
        print(f"wrote {path} ({fmt_bytes(path.stat().st_size)})", file=sys.stderr)
    return 0


def write_perfetto(trace: Trace, out: Path) -> Path:
    from gaplens.store.perfetto import chrome_trace

    data = chrome_trace(trace)
    if out.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    _write(out, data)
    return out


def tables(trace: Trace) -> dict[str, pa.Table]:
    """The tables ``--csv`` and ``--parquet`` write: every event, and every blank region (largest first)."""
    from gaplens.api import gaps

    out = {"events": trace.to_arrow(), "gaps": pa.Table.from_pandas(gaps(trace), preserve_index=False)}
    assert tuple(out) == TABLES
    return out


def write_tables(trace: Trace, folder: Path, fmt: str) -> list[Path]:
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TraceError(f"cannot create {folder}: {exc.strerror}") from exc
    out = []
    for name, table in tables(trace).items():
        sink = pa.BufferOutputStream()
        if fmt == "parquet":
            pq.write_table(table, sink)
        else:
            pcsv.write_csv(_flat(table), sink)
        path = folder / f"{name}.{fmt}"
        _write(path, sink.getvalue().to_pybytes())
        out.append(path)
    return out


def _flat(table: pa.Table) -> pa.Table:
    """CSV holds neither dictionaries nor lists: decode names, join evidence indices with spaces."""
    columns = []
    for col in table.columns:
        if pa.types.is_dictionary(col.type):
            col = col.cast(pa.string())
        elif pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
            col = pa.array([" ".join(map(str, v)) if v else "" for v in col.to_pylist()], pa.string())
        columns.append(col)
    return pa.table(columns, names=table.column_names)


def _write(path: Path, data: bytes) -> None:
    write_output(output_file(path, [], "export"), data)  # checked again: the folder may have changed meanwhile
