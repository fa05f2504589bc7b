"""Every command's ``--help`` (and the top-level one) exits 0 with usage text (issue 31: ``compare --help`` died)."""

from __future__ import annotations

import argparse

import pytest

from gaplens.tui import cli


def _subcommands() -> list[str]:
    parser = cli.build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sorted(actions[0].choices)


def test_every_subcommand_is_dispatched():
    # A command the parser knows but main() does not route (or the reverse) would never reach its --help.
    assert set(_subcommands()) == set(cli.COMMANDS)


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        status = cli.main(argv)
    except SystemExit as exc:  # argparse's --help exits 0 itself
        status = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    assert "internal error" not in err, err
    return status, out


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_command_help(command: str, capsys: pytest.CaptureFixture[str]):
    status, out = _help([command, "--help"], capsys)
    assert status == 0
    assert out.startswith(f"usage: gaplens {command}")
    assert "--help" in out


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_top_level_help(flag: str, capsys: pytest.CaptureFixture[str]):
    status, out = _help([flag], capsys)
    assert status == 0
    assert out.startswith("usage: gaplens")
    for command in cli.COMMANDS:
        assert command in out
