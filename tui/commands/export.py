"""`gaplens export`: the trace and gaplens's readings for other tools (Perfetto, pandas, spreadsheets).

    gaplens export TRACE --perfetto OUT.json[.gz]   Chrome-trace JSON: the trace + gaplens tracks
    gaplens export TRACE --csv DIR                 DIR/events.csv, names.csv, details.csv, gaps.csv
    gaplens export TRACE --parquet DIR             DIR/events.parquet, DIR/gaps.parquet

Memory is bounded by the events, not by name length x uses: the Perfetto file and events.csv are written a
chunk of events at a time; each event carries at most ``perfetto.NAME_LIMIT`` characters of its name there
(events.csv's ``name_id`` and ``details_id`` point into names.csv and details.csv, which hold each text
whole once: nsys appends the demangled name to a kernel's details; Parquet keeps both dictionary-encoded,
whole), and one line on stderr says what was cut.

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

#: The tables ``--csv`` and ``--parquet`` write (``tables``), one file each. CSV has no dictionaries: its
#: events carry names and details cut, with an id into ``names`` / ``details``, tables of the whole texts.
TABLES = ("events", "gaps")
#: events.csv's dictionary columns written as tables of their own: (column, its id column, the file).
CSV_TEXTS = (("name", "name_id", "names"), ("details", "details_id", "details"))
FILES = {"csv": ("events", *(f for _, _, f in CSV_TEXTS), "gaps"), "parquet": TABLES}


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
        fmt: output_folder(getattr(args, fmt), [f"{t}.{fmt}" for t in FILES[fmt]], [args.trace], f"export --{fmt}")
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
    from gaplens.store.perfetto import cut_note

    if perfetto is not None and (note := cut_note(trace.names, trace.name_id, "name")):
        print(f"gaplens: export --perfetto: {note}; each whole once on the gaplens row 'cut names (full text)'",
              file=sys.stderr)  # fmt: skip
    if "csv" in folders:
        notes = [cut_note(trace.names, trace.name_id, "name"), cut_note(trace.details, trace.detail_id, "details text")]
        if note := "; ".join(n for n in notes if n):
            print(f"gaplens: export --csv: {note}; each whole once in names.csv / details.csv", file=sys.stderr)
    return 0


def write_perfetto(trace: Trace, out: Path) -> Path:
    from gaplens.store.perfetto import write_chrome_trace

    def write(fh) -> None:
        if out.name.endswith(".gz"):
            with gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6, mtime=0) as gz:
                write_chrome_trace(trace, gz)
        else:
            write_chrome_trace(trace, fh)

    _write(out, write)
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
        path = folder / f"{name}.{fmt}"
        if fmt == "parquet":
            _write(path, lambda fh, table=table: pq.write_table(table, fh))  # names stay dictionary-encoded
        elif name == "events":
            _write(path, lambda fh, table=table: _events_csv(table, fh))
            out.append(path)
            for column, _, file in CSV_TEXTS:
                texts = trace.names if column == "name" else trace.details
                _write(folder / f"{file}.csv", lambda fh, c=column, t=texts: _texts_csv(c, t, fh))
                out.append(folder / f"{file}.csv")
            continue
        else:
            _write(path, lambda fh, table=table: pcsv.write_csv(_flat(table), fh))
        out.append(path)
    return out


def _events_csv(table: pa.Table, fh) -> None:
    """events.csv a chunk of rows at a time: names cut (``perfetto.cut_name``) once per distinct name, and
    their ``name_id`` into names.csv; the text in flight is bounded by the chunk, not by name length x uses."""
    import pyarrow.csv as pcsv

    from gaplens.store.perfetto import CHUNK_EVENTS, cut_name

    for column, id_column, _ in CSV_TEXTS:
        at = table.column_names.index(column)
        texts = table.column(column).combine_chunks()
        short = pa.DictionaryArray.from_arrays(
            texts.indices, pa.array([cut_name(t) for t in texts.dictionary.to_pylist()], pa.string())
        )
        table = table.set_column(at, column, short).add_column(at + 1, id_column, texts.indices)
    writer = None
    for batch in table.to_batches(max_chunksize=CHUNK_EVENTS):
        flat = _flat(pa.Table.from_batches([batch]))
        if writer is None:
            writer = pcsv.CSVWriter(fh, flat.schema)
        writer.write_table(flat)
    if writer is None:
        pcsv.write_csv(_flat(table), fh)
    else:
        writer.close()


def _texts_csv(column: str, texts: list[str], fh) -> None:
    """Every distinct text of one events.csv column whole, once: its id column there is the row here."""
    import pyarrow.csv as pcsv

    id_column = next(i for c, i, _ in CSV_TEXTS if c == column)
    ids = pa.array(range(len(texts)), pa.int32())
    pcsv.write_csv(pa.table({id_column: ids, column: pa.array(texts, pa.string())}), fh)


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


def _write(path: Path, data) -> Path:
    return write_output(output_file(path, [], "export"), data)  # checked again: the folder may have changed meanwhile
