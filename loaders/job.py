"""Which files make a job: paths and folders expanded into trace files, each sniffed for its format.

Only the first bytes of each file are read here; parsing happens per rank, in workers
(``analysis.job.run``). A file that is missing or not a trace is not an error for the job: it
is reported by name and the others are read. Kineto files and nsys reports in one job are an
error, because nothing pairs their clocks or their collectives.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass

from gaplens.loaders.errors import TraceError
from gaplens.loaders.files import GZIP_MAGIC, SQLITE_MAGIC, read_head
from gaplens.loaders.xplane.sniff import looks_like_xplane, runs

#: File names a folder of rank traces is read for (tensorboard_trace_handler writes ``*.pt.trace.json[.gz]``).
TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite.gz", ".nsys-rep", ".xplane.pb", ".xplane.pb.gz")
#: Files gaplens itself writes beside traces (notes) are never ranks.
OWN_SUFFIXES = (".gaplens.json",)
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class JobFile:
    path: str
    format: str | None  # "kineto" | "nsys" | "xplane" | "rocprof" | None: unusable, see ``problem``
    problem: str = ""


def natural_key(name: str) -> list:
    """``rank10`` after ``rank9``: digit runs compare as numbers."""
    return [int(p) if p.isdigit() else p for p in _DIGITS.split(name)]


def expand(paths: list[str]) -> list[str]:
    """Files of a job in the order given, each once; a folder contributes its trace files in natural order."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p) and _profile_hosts(p):  # a JAX profile folder: its newest run, one rank per host
            out += _profile_hosts(p)
        elif os.path.isdir(p):
            names = sorted(os.listdir(p), key=natural_key)
            out += [
                os.path.join(p, n)
                for n in names
                if not n.startswith(".")
                and n.endswith(TRACE_SUFFIXES)
                and not n.endswith(OWN_SUFFIXES)
                and os.path.isfile(os.path.join(p, n))
            ]
        else:
            out.append(p)
    seen: set[str] = set()
    once = []
    for p in out:  # the same file named twice (or in a folder and by name) is one rank, not two
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            once.append(p)
    return once


def _profile_hosts(folder: str) -> list[str]:
    found = runs(folder)
    return found[0] if found else []


def sniff(path: str) -> JobFile:
    """The format of one file from its first bytes, or why it cannot be a rank."""
    try:
        head = read_head(path, 4096)
    except TraceError as exc:
        return JobFile(path, None, str(exc))
    if not head:
        return JobFile(path, None, f"{path}: the file is empty")
    body = head
    if head.startswith(GZIP_MAGIC):
        try:
            body = zlib.decompressobj(wbits=47).decompress(head, 4096)
        except zlib.error:
            return JobFile(path, None, f"{path}: damaged gzip header")
    if body.startswith(SQLITE_MAGIC) or path.endswith(".nsys-rep"):
        return JobFile(path, "nsys")
    if looks_like_xplane(path, body):
        return JobFile(path, "xplane")
    if b'"rocprofiler-sdk-tool"' in body:
        return JobFile(path, "rocprof")
    if body.lstrip()[:1] in (b"{", b"["):
        return JobFile(path, "kineto")
    return JobFile(path, None, f"{path}: not a trace (neither Kineto JSON nor an nsys SQLite export)")


def job_files(paths: list[str]) -> list[JobFile]:
    """Every file of the job, sniffed; mixed Kineto and nsys input is a TraceError (one line)."""
    files = [sniff(p) for p in expand(paths)]
    if not files:
        raise TraceError(f"no trace files in {', '.join(paths)}")
    kinds = {f.format for f in files if f.format}
    if len(kinds) > 1:
        one = ", ".join(f"{k} {next(f.path for f in files if f.format == k)}" for k in sorted(kinds))
        raise TraceError(f"mixed formats in one job ({one}): open traces of one format")
    return files
