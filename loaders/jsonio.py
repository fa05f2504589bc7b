"""Bytes of a Kineto file to (top-level keys, event list, warnings), surviving truncation."""

from __future__ import annotations

from collections.abc import Callable

import orjson

from loaders.model import TraceError

Progress = Callable[[str, float], None]


def read_events(data: bytes, progress: Progress | None = None) -> tuple[dict, list, list[str]]:
    """Parse the whole document; on damage, keep every complete event before it."""
    warnings: list[str] = []
    if progress is not None:
        progress("parsing", 0.0)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        doc, dropped = _recover(data)
        if doc is None:
            raise TraceError(f"not valid JSON ({_short(exc)})") from None
        warnings.append(f"the file is truncated or damaged: kept the events before byte {dropped}")
    if isinstance(doc, list):
        top: dict = {"__bare_array__": True}
        events = doc
    elif isinstance(doc, dict):
        if "traceEvents" not in doc:
            raise TraceError("JSON without a traceEvents array: not a Chrome/Kineto trace")
        top = doc
        events = doc["traceEvents"]
        if not isinstance(events, list):
            raise TraceError("traceEvents is not an array")
    else:
        raise TraceError("JSON that is neither an object nor an array: not a trace")
    return top, events, warnings


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120]


def _recover(data: bytes) -> tuple[object | None, int]:
    """Cut after the last complete event object and close the containers.

    Tries the last few ``}`` positions, closing as a wrapped object or a bare array.
    """
    head = data.lstrip()[:1]
    pos = len(data)
    for _ in range(64):
        pos = data.rfind(b"}", 0, pos)
        if pos < 0:
            return None, 0
        body = data[: pos + 1]
        for tail in (b"]", b"]}") if head == b"{" else (b"]",):
            try:
                doc = orjson.loads(body + tail)
            except orjson.JSONDecodeError:
                continue
            if isinstance(doc, dict) and not isinstance(doc.get("traceEvents"), list):
                continue
            return doc, pos + 1
    return None, 0
