"""What every headless command shares: loading a trace with its warnings, printing JSON, clean output streams."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterator
from typing import TextIO

from gaplens.loaders import load
from gaplens.loaders.model import Trace
from gaplens.loaders.text import clean_text

# Characters json.dumps(ensure_ascii=False) leaves raw that a terminal may act on (C1, bidi, surrogates).
_JSON_UNSAFE = re.compile(r"[\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def load_trace(path: str) -> Trace:
    """Load a trace and print each of its warnings as one line on stderr."""
    trace = load(path)
    for warning in trace.meta.warnings:
        print(f"gaplens: warning: {warning}", file=sys.stderr)
    return trace


def print_json(obj: object) -> None:
    """Indented JSON; characters a terminal could act on are written as ``\\uXXXX`` escapes (same value)."""
    text = json.dumps(obj, indent=2, ensure_ascii=False)
    print(_JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


class CleanStream:
    """A text stream that passes everything through ``clean_text`` (newlines kept) before writing.

    The last guard of the command line: trace text is sanitised where it enters the
    model, but paths come from the user's shell and may hold anything a file name can.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(clean_text(text, keep_newlines=True))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def clean_output() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` as ``CleanStream`` for the duration."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = CleanStream(out), CleanStream(err)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
