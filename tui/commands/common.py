"""What every headless command shares: loading a trace with its warnings, printing JSON."""

from __future__ import annotations

import json
import sys

from gaplens.loaders import load
from gaplens.loaders.model import Trace


def load_trace(path: str) -> Trace:
    """Load a trace and print each of its warnings as one line on stderr."""
    trace = load(path)
    for warning in trace.meta.warnings:
        print(f"gaplens: warning: {warning}", file=sys.stderr)
    return trace


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False))
