"""CI step: the built wheel holds one top-level name (``gaplens``), every layer, the data and the script.

A distribution that drops ``tui`` or ``samples`` into site-packages breaks any other project with
those names (and is broken by them). Usage: ``python .ci/check_wheel.py dist/gaplens-*.whl``.
"""

from __future__ import annotations

import sys
import zipfile

NEEDED = (
    "gaplens/__init__.py",
    "gaplens/__main__.py",
    "gaplens/loaders/model.py",
    "gaplens/loaders/kineto/reader.py",
    "gaplens/loaders/nsys/reader.py",
    "gaplens/loaders/xplane/wire.py",
    "gaplens/loaders/rocprof/__init__.py",
    "gaplens/analysis/gaps.py",
    "gaplens/analysis/job/reading.py",
    "gaplens/analysis/floor/reading.py",
    "gaplens/analysis/protocol/walk.py",
    "gaplens/store/cache.py",
    "gaplens/tui/app.py",
    "gaplens/tui/app.tcss",
    "gaplens/tui/commands/summary.py",
    "gaplens/tui/screens/help.py",
    "gaplens/samples/decode_eager.json.gz",
)
ENTRY = "gaplens = gaplens.tui.cli:main"


def problems(wheel: zipfile.ZipFile) -> list[str]:
    names = set(wheel.namelist())
    found = []
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    if tops != {"gaplens"}:
        found.append(f"top-level names {sorted(tops)}, want ['gaplens']")
    found += [f"missing {n}" for n in NEEDED if n not in names]
    entries = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    if not entries or ENTRY not in wheel.read(entries[0]).decode():
        found.append(f"no console script line {ENTRY!r}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: check_wheel.py WHEEL", file=sys.stderr)
        return 2
    with zipfile.ZipFile(argv[0]) as wheel:
        found = problems(wheel)
    for line in found:
        print(f"wheel: {line}", file=sys.stderr)
    if not found:
        print(f"wheel: {argv[0]} ok")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
