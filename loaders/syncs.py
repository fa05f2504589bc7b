"""The one text format of sync-row details: both loaders write it, the critical path reads it back.

A cross-stream wait (``cudaStreamWaitEvent``) reads, in the details panel and in ``Trace.details``::

    Stream Wait Event  stream 24 waits on stream 20  record corr 1385
    │                  │                    │          └ correlation id of the cudaEventRecord call
    │                  │                    └ stream the awaited event was recorded on
    │                  └ the waiting stream
    └ kind (Kineto ``cuda_sync_kind``; nsys names it from the blocking call)

Unknown parts (-1, or absent from the file) are left out: ``Event Sync  waits on stream 20``
is a host thread waiting; ``Stream Sync  stream 7`` a whole-stream sync.
"""

from __future__ import annotations

import re
from typing import NamedTuple

_WAIT = re.compile(r"(?:\bstream (\d+) )?waits on stream (\d+)")
_RECORD = re.compile(r"\brecord corr (\d+)")


class SyncWait(NamedTuple):
    """What a sync row's details say about a wait; -1 where unknown."""

    stream: int  # the waiting stream
    on_stream: int  # the stream the awaited event was recorded on
    record_corr: int  # correlation id of the event-record call


def wait_text(stream: int, on_stream: int, record_corr: int) -> str:
    """The stream part of a sync detail (empty when nothing is known)."""
    who = f"stream {stream}" if stream >= 0 else ""
    parts = [f"{who} waits on stream {on_stream}".lstrip() if on_stream >= 0 else who]
    if record_corr >= 0:
        parts.append(f"record corr {record_corr}")
    return "  ".join(p for p in parts if p)


def sync_detail(kind: str, stream: int, on_stream: int, record_corr: int) -> str:
    """``kind`` followed by the stream part, two spaces apart like every other detail."""
    return "  ".join(p for p in (kind, wait_text(stream, on_stream, record_corr)) if p)


def parse_wait(detail: str) -> SyncWait:
    """Read back what ``wait_text`` wrote (also the older ``waits on stream N`` alone)."""
    m = _WAIT.search(detail)
    r = _RECORD.search(detail)
    if m is None:
        return SyncWait(-1, -1, int(r.group(1)) if r else -1)
    return SyncWait(int(m.group(1)) if m.group(1) else -1, int(m.group(2)), int(r.group(1)) if r else -1)
