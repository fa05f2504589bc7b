"""`python -m bench [SECTION ...]`: run the benchmark sections and print their lines.

Each section is a module ``bench.<name>`` with ``run(args) -> None`` that prints its own
lines; a section that is not present is skipped, so sections can land one at a time.
"""

from __future__ import annotations

import argparse
import importlib
import sys

SECTIONS = ("load", "reopen", "viewer", "nsys", "nvtx", "analysis", "render", "ranks", "whatif")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "sections",
        nargs="*",
        default=list(SECTIONS),
        help=f"any of {', '.join(SECTIONS)} (the default), or fuzz (20,000 inputs; only when named)",
    )
    parser.add_argument("--quick", action="store_true", help="smaller synthetic traces, fewer repeats")
    args = parser.parse_args(argv)
    for name in args.sections:
        try:
            module = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"bench.{name}":
                print(f"[{name}] not present, skipped")
                continue
            raise
        print(f"== {name} ==")
        module.run(args)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
