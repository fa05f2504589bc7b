"""Whether a file is an XSpace, from its name or first bytes, and the runs of a profile folder (no decoding,
nothing imported)."""

from __future__ import annotations

import os

SUFFIX = ".xplane.pb"
SUFFIXES = (SUFFIX, SUFFIX + ".gz", ".pb")
_CONTROL = frozenset(range(9)) | frozenset(range(14, 32))


def looks_like_xplane(path: str, body: bytes) -> bool:
    """By name, or by field 1 (planes) as a length-delimited record (0x0a) followed by binary protobuf.

    JSON can start with 0x0a too (a newline), but JSON text holds no control bytes, while an XSpace's
    first plane has tags and varints below 0x20 at once.
    """
    if path.endswith(SUFFIXES):
        return True
    return body[:1] == b"\x0a" and any(c in _CONTROL for c in body[1:64])


def runs(folder: str) -> list[list[str]]:
    """The runs under a profile folder, newest first, each as its host files (``<host>.xplane.pb``).

    ``folder`` may be a log dir (``…/plugins/profile/<run>/``), ``plugins/profile`` itself, or one run.
    Runs are named by their start time (``2024_05_01_12_00_00``), so name order is time order.
    """
    for base in (os.path.join(folder, "plugins", "profile"), os.path.join(folder, "profile"), folder):
        if not os.path.isdir(base):
            continue
        here = _hosts(base)
        if here:
            return [here]
        found = []
        for run in sorted(os.listdir(base), reverse=True):
            hosts = _hosts(os.path.join(base, run))
            if hosts:
                found.append(hosts)
        if found:
            return found
    return []


def _hosts(run: str) -> list[str]:
    if not os.path.isdir(run):
        return []
    return sorted(os.path.join(run, n) for n in os.listdir(run) if n.endswith((SUFFIX, SUFFIX + ".gz")))
