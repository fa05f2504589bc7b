"""Any terminal: labels and bars readable in every built-in Textual theme; NO_COLOR means no colour at all."""

from __future__ import annotations

import asyncio

import pytest
from rich.color import Color as RichColor
from textual.filter import NoColor
from textual.theme import BUILTIN_THEMES

from gaplens.tui.app import make_app
from gaplens.tui.raster import GAP_GLYPH, GAP_LARGEST_GLYPH, Style
from gaplens.tui.timeline import _GUTTER, _GUTTER_CURSOR
from tests.conftest import loaded
from tests.pilot import readings_ready


def _luminance(c: RichColor) -> float:
    def channel(v: int) -> float:
        x = v / 255
        return x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4

    r, g, b = c.get_truecolor()
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)


def contrast(a: RichColor, b: RichColor) -> float:
    """WCAG contrast ratio, 1 (none) to 21 (black on white)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_labels_and_bars_are_readable_in_every_builtin_theme():
    """Row labels were hard-coded white (invisible on light themes); now text ≥ 4.5:1 and bars ≥ 2.5:1 everywhere."""
    app = make_app(loaded("smells.json.gz"), mono=False)
    weak: list[str] = []

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            tl = await readings_ready(app, pilot)
            for name, theme in BUILTIN_THEMES.items():
                app.theme = name
                await pilot.pause()
                tl._styles.clear()
                bg = tl.rich_style.bgcolor
                if theme.ansi or bg is None or bg.triplet is None:
                    continue  # the terminal's own colours: readable by the user's choice
                for sid, floor in ((_GUTTER, 4.5), (_GUTTER_CURSOR, 4.5)):
                    style = tl._style(sid)
                    if contrast(style.color, style.bgcolor) < floor:
                        weak.append(f"{name}: gutter {sid} {contrast(style.color, style.bgcolor):.2f}")
                for s in Style:
                    if s == Style.EMPTY:
                        continue
                    color = tl._style(int(s)).color
                    if contrast(color, bg) < 2.5:
                        weak.append(f"{name}: {s.name} {contrast(color, bg):.2f}")

    asyncio.run(main())
    assert not weak, "\n".join(weak)


def test_no_color_sends_no_colour_and_glyphs_still_tell_the_classes_apart(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app(loaded("smells.json.gz"))
    found: dict[str, object] = {}

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            tl = await readings_ready(app, pilot)
            found["before"] = "".join(s.text for y in range(8) for s in tl.render_line(y))
            await pilot.press("c")
            await pilot.pause()
            filters = app.get_line_filters()
            found["filters"] = [type(f).__name__ for f in filters]
            colours = set()
            text = []
            for y in range(tl.scrollable_content_region.height):
                segments = list(tl.render_line(y))
                for f in filters:
                    segments = f.apply(
                        segments, app.background_colors[1] if hasattr(app, "background_colors") else None
                    )
                for seg in segments:
                    if seg.style is not None:
                        colours.update(c for c in (seg.style.color, seg.style.bgcolor) if c and not c.is_default)
                text.append("".join(seg.text for seg in segments))
            found["colours"] = colours
            found["text"] = "\n".join(text)
            found["cursor"] = tl._style(_GUTTER_CURSOR)

    asyncio.run(main())
    assert "NoColor" in found["filters"] and "Monochrome" not in found["filters"]
    assert not found["colours"]
    text = str(found["text"])
    assert chr(GAP_LARGEST_GLYPH) in text  # the largest gap is ━ ...
    assert chr(GAP_GLYPH) in str(found["before"]) and chr(GAP_LARGEST_GLYPH) in str(found["before"])  # ... others ·
    assert found["cursor"].reverse  # the row cursor is reversed, not a background that NO_COLOR removes


@pytest.mark.parametrize("value", ["1", ""])
def test_no_color_is_read_like_textual_reads_it(monkeypatch, value):
    monkeypatch.setenv("NO_COLOR", value)
    app = make_app(loaded("smells.json.gz"))
    assert app.mono and any(isinstance(f, NoColor) for f in app._filters)
