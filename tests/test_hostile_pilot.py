"""A trace whose every string carries escapes and markup walks the whole viewer: nothing reaches the terminal raw.

Every text field of the trace (event, process and thread names, the GPU name, versions,
metadata, sync kinds, the file name itself) carries an OSC window-title change, a
screen clear and ``[link=x]``. After each step of the walk (header, rows, details,
search, phases, the six protocol steps, notes, marked phases, export, help) the frame
the app would write to the terminal is rendered and checked: only Textual's own colour
and cursor sequences, no OSC, no BEL, no clear, no C1, and the markup shown literally.
The exported Markdown and SVG hold no control character and the SVG parses as XML.
"""

from __future__ import annotations

import asyncio
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench.seeds import dumps, kineto_doc
from gaplens.tui.app import GaplensApp, make_app
from gaplens.tui.notes_panel import NotesPanel
from gaplens.tui.protocol_panel import ProtocolPanel

PAYLOAD = "\x1b]0;x\x07\x1b[2J[link=x]"
SIZE = (180, 50)
# What Textual itself writes: SGR colours/styles and cursor moves. Anything else with ESC is from the data.
_OWN = re.compile(r"\x1b\[[0-9;:]*[mHABCDGK]")
_RAW = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _hostile(value: object) -> object:
    """The payload added to every string of a JSON value (keys included), structure kept."""
    if isinstance(value, str):
        return f"{PAYLOAD}{value}"
    if isinstance(value, dict):
        return {_hostile(k) if k not in _STRUCTURAL else k: _hostile(v) if k not in _STRUCTURAL else v
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, list):
        return [_hostile(v) for v in value]
    return value


# Keys whose values select how an event is read; they keep their meaning (a kernel stays a kernel).
_STRUCTURAL = {"ph", "cat", "traceEvents", "args", "ts", "dur", "pid", "tid", "id", "correlation", "device", "stream"}


@pytest.fixture
def hostile_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GAPLENS_STATE_DIR", str(tmp_path / "state"))
    doc = kineto_doc()
    events = doc.pop("traceEvents")
    out = _hostile(doc)
    assert isinstance(out, dict)
    hostile_events = []
    for ev in events:
        ev = {k: (_hostile(v) if k not in _STRUCTURAL else v) for k, v in ev.items()}
        if isinstance(ev.get("args"), dict):
            ev["args"] = {k: (_hostile(v) if k not in _STRUCTURAL else v) for k, v in ev["args"].items()}
        hostile_events.append(ev)
    out["traceEvents"] = hostile_events
    out["schemaVersion"] = f"1{PAYLOAD}"
    path = tmp_path / "x\x1b]0;t\x07[link=x]trace.json"
    path.write_bytes(dumps(out))
    return path


def frame(app: GaplensApp) -> str:
    """The bytes the app would write to a real terminal for its current screen (and the ones under it)."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    assert update is not None
    return update.render_segments(app.console)


def check(text: str, where: str) -> None:
    """No escape or control character in ``text`` but Textual's own SGR and cursor sequences."""
    rest = _OWN.sub("", text).replace("\n", "").replace("\r", "")
    assert "\x1b" not in rest, (where, rest[max(0, rest.find("\x1b") - 40) : rest.find("\x1b") + 40])
    bad = _RAW.search(rest)
    assert bad is None, (where, repr(rest[max(0, bad.start() - 40) : bad.end() + 40]))
    assert "]0;x" not in rest and "]0;t" not in rest, where  # the OSC went whole, parameters included


async def _settle(app: GaplensApp, pilot, predicate, what: str) -> None:
    for _ in range(500):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


def test_hostile_trace_walks_the_whole_viewer(hostile_trace: Path) -> None:
    app = make_app(str(hostile_trace))
    frames: dict[str, str] = {}

    async def main() -> None:
        async with app.run_test(size=SIZE) as pilot:

            async def snap(name: str) -> None:
                await pilot.pause()
                frames[name] = frame(app)
                check(frames[name], name)

            def loaded() -> bool:
                return app.model is not None and app.model.readings.analysed and bool(app.query("#timeline"))

            await _settle(app, pilot, loaded, "the trace loaded")
            tl = app.timeline
            trace = app.model.trace
            assert all("\x1b" not in n and "\x07" not in n for n in trace.names)
            assert any("[link=x]" in n for n in trace.names)  # markup is text, kept
            await snap("header and rows")
            # Rows: walk down every row so each label is drawn at the cursor once.
            for _ in range(len(tl.rows)):
                await pilot.press("j")
            await snap("rows")
            # Details of a kernel, a sync (its kind is hostile too) and an annotation.
            for kind in (5, 4, 2):
                idx = int((trace.kind == kind).nonzero()[0][0])
                tl.select_event(idx)
                await pilot.pause()
                app._details.display = True
                await snap(f"details of kind {kind}")
            # Search, typed with markup; matches marked; next match.
            await pilot.press("slash", *"[link=x]", "enter")
            await snap("search")
            await pilot.press("n")
            await snap("next match")
            # Phases list and a filter to one phase.
            await pilot.press("p")
            await snap("phase list")
            await pilot.press("enter")
            await snap("phase filter")
            await pilot.press("p", "escape")
            # The six protocol steps.
            await pilot.press("P")
            await _settle(app, pilot, lambda: app.walkthrough is not None and bool(app.protocol_step), "walkthrough")
            panel = app.query_one(ProtocolPanel)
            assert "[link=x]" in panel.facts_text or any("[link=x]" in v for v in frames.values())
            await snap("protocol step 1")
            for step in range(2, 7):
                await pilot.press("right_square_bracket")
                assert app.protocol_step == step
                await snap(f"protocol step {step}")
            await pilot.press("e", "ctrl+u", *"try [link=x] graphs", "enter")
            await snap("answer")
            # A note pinned to the selected (hostile) event, the notes list, a marked phase.
            await pilot.press("b", *"[link=x] note", "enter")
            await snap("note pinned")
            await pilot.press("B")
            await pilot.pause()
            assert app.query(NotesPanel)
            await snap("notes list")
            await pilot.press("B")
            await pilot.press("m", "l", "l", "l", "m", *"[link=x]phase", "enter")
            await snap("phase marked")
            await pilot.press("E")
            await snap("export")
            await pilot.press("question_mark")
            await snap("help")
            await pilot.press("escape")

    asyncio.run(main())
    assert app.return_code in (None, 0) and app.error is None
    # The markup is shown as text somewhere on screen, not turned into a link.
    assert any("[link=x]" in _OWN.sub("", f) for f in frames.values())
    assert not any("\x1b]8;" in f for f in frames.values())  # no hyperlink escape from a [link] tag
    md = next(hostile_trace.parent.glob("state/exports/*.gaplens.md"))  # the state dir, not beside
    svg = next(hostile_trace.parent.glob("state/exports/*.gaplens.svg"))
    md_text = md.read_text(encoding="utf-8")
    svg_text = svg.read_text(encoding="utf-8")
    for name, text in (("markdown", md_text), ("svg", svg_text)):
        assert _RAW.search(text.replace("\n", "")) is None, name
        assert "\x1b" not in text, name
    assert "[link=x]" in md_text and "[link=x] note" in md_text
    ET.fromstring(svg_text)  # well-formed XML
    notes = next(hostile_trace.parent.glob("state/notes/*.gaplens.json")).read_text(encoding="utf-8")
    assert "\x1b" not in notes and "[link=x] note" in notes
