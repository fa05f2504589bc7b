"""The `gaplens` command line: the TUI by default, headless readings as subcommands.

Errors are one line on stderr: exit 2 for unusable input, 1 for an internal failure.
Set GAPLENS_DEBUG=1 to see the traceback of an internal failure. ``--version`` prints the version.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence

from gaplens import store
from gaplens.loaders import TraceError
from gaplens.loaders.files import read_head
from gaplens.loaders.text import shorten
from gaplens.tui.commands.common import clean_output, load_trace, print_json

COMMANDS = ("summary", "gaps", "smells", "report", "compare", "export", "ranks", "whatif", "floor")


def version() -> str:
    """The installed distribution's version ("unknown" when gaplens runs without being installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("gaplens")
    except PackageNotFoundError:
        return "unknown (not installed)"


def bundled_sample() -> str:
    """Path of the default trace shipped inside the package."""
    from importlib.resources import files

    return str(files("gaplens.samples") / "decode_eager.json.gz")


def cmd_summary(args: argparse.Namespace) -> int:
    from gaplens.analysis.summary import summary
    from gaplens.tui.commands.summary import render_text

    trace = load_trace(args.trace)
    if args.json:
        print_json(summary(trace, args.top))
    else:
        print(render_text(trace, args.top))
    return 0


def _commands() -> dict[str, Callable[[argparse.Namespace], int]]:
    from gaplens.tui.commands import compare, export, floor, ranks, readings, whatif

    return {
        "summary": cmd_summary,
        **readings.COMMANDS,
        "compare": compare.run,
        "export": export.run,
        "ranks": ranks.run,
        "whatif": whatif.run,
        "floor": floor.run,
    }


def build_parser() -> argparse.ArgumentParser:
    from gaplens.tui.commands import compare, export, readings

    parser = argparse.ArgumentParser(
        prog="gaplens",
        description="GPU profiler timelines in the terminal: is the device busy, or not being fed?",
    )
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("summary", help="devices, busy share, phases, top kernels / API / ranges")
    p.add_argument("trace")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--top", type=int, default=10, help="rows per top list (default 10)")
    readings.add_parsers(sub)
    compare.add_parser(sub)
    export.add_parser(sub)
    from gaplens.tui.commands import ranks  # a job (issue 12)

    ranks.add_parser(sub)
    from gaplens.tui.commands import whatif  # what-if (issue 21)

    whatif.add_parser(sub)
    from gaplens.tui.commands import floor  # the hardware floor (issue 20)

    floor.add_parser(sub)
    return parser


def build_tui_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gaplens",
        description="Open a trace in the timeline viewer. Subcommands: " + ", ".join(COMMANDS),
    )
    parser.add_argument(
        "trace",
        nargs="*",
        help="Kineto .json[.gz] or nsys .sqlite[.gz]/.nsys-rep (default: bundled sample); "
        "several traces or a folder: a job, opened on its rank overview",
    )
    parser.add_argument(
        "--notes-beside",
        action="store_true",
        help="keep notes and exports beside the trace (default: the state dir, $GAPLENS_STATE_DIR or "
        "~/.local/state/gaplens; same as GAPLENS_NOTES_BESIDE=1)",
    )
    parser.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    return parser


def run_tui(paths: list[str] | str | None) -> int:
    paths = [paths] if isinstance(paths, str) else list(paths or [])
    if len(paths) > 1 or (paths and os.path.isdir(paths[0])):  # a job (issue 12)
        from gaplens.tui.screens.job import run_job_viewer

        return run_job_viewer(paths)
    path = paths[0] if paths else bundled_sample()
    read_head(path, 16)  # missing, unreadable or not a file: one line (exit 2) before the screen switches
    from gaplens.tui.early import start, started_up

    early = start(path)  # a warm open's cache hit and readings, while the app's imports run
    try:
        from gaplens.tui.app import run_app

        return run_app(path, early)
    finally:
        started_up(freeze=False)  # however the viewer ended, the collector is not left paused


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    store.install()
    try:
        if argv and argv[0] in COMMANDS:
            args = build_parser().parse_args(argv)
            with clean_output():
                return _commands()[args.command](args)
        if argv and argv[0] in ("-h", "--help"):
            build_tui_parser().print_help()
            print()
            build_parser().print_help()
            return 0
        args = build_tui_parser().parse_args(argv)
        if args.version:
            print(f"gaplens {version()}")
            return 0
        if args.notes_beside:
            from gaplens.store.notes import BESIDE_ENV

            os.environ[BESIDE_ENV] = "1"
        return run_tui(args.trace)
    except TraceError as exc:
        print(f"gaplens: {shorten(exc, 600)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if os.environ.get("GAPLENS_DEBUG"):
            traceback.print_exc()
        print(f"gaplens: internal error: {type(exc).__name__}: {shorten(exc, 300)}", file=sys.stderr)
        return 1
