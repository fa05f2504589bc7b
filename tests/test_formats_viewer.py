"""The new formats open in the viewer as a user would open them: the header names the format, the
timeline shows GPU rows, and the blank regions arrive (issue 30: every sample opens in the viewer)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gaplens.loaders import load
from gaplens.loaders.model import FORMAT_NAMES
from gaplens.tui.app import make_app
from gaplens.tui.viewmodel import build_model
from tests.conftest import shared_file
from tests.pilot import readings_ready, screen_lines

FORMATS = Path(__file__).resolve().parent / "data" / "formats"


def _samples() -> list[tuple[str, Path]]:
    return [
        ("xplane", FORMATS / "jax_h200_train.xplane.pb"),
        ("jax-trace-json", FORMATS / "jax_h200_train.perfetto_trace.json.gz"),
    ]


@pytest.mark.parametrize(("fmt", "path"), _samples(), ids=[f for f, _ in _samples()])
def test_header_names_the_format(fmt: str, path: Path) -> None:
    trace = load(str(path))
    assert trace.meta.source_format == fmt
    assert FORMAT_NAMES[fmt] in build_model(trace).header()


def test_the_header_of_a_kineto_trace_says_kineto() -> None:
    from tests.conftest import loaded

    assert "Kineto" in build_model(loaded("decode_eager.json.gz")).header()


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [
        FORMATS / "jax_h200_train.xplane.pb",
        FORMATS / "jax_h200_train.perfetto_trace.json.gz",
        "formats/rocprofv3/908_results.json.gz",
    ],
    ids=["xplane", "jax-trace-json", "rocprof"],
)
def test_each_new_format_opens_in_the_viewer(path) -> None:
    """At 160 columns the header keeps every item: the format's name is on screen with the GPU rows."""
    real = path if isinstance(path, Path) else shared_file(path)
    trace = load(str(real))

    async def run() -> list[str]:
        app = make_app(str(real), mono=True)
        async with app.run_test(size=(160, 40)) as pilot:
            assert await readings_ready(app, pilot) is not None
            await pilot.pause()
            return screen_lines(app)

    lines = asyncio.run(run())
    text = "\n".join(lines)
    assert FORMAT_NAMES[trace.meta.source_format] in text
    assert "GPU" in text and "Traceback" not in text
