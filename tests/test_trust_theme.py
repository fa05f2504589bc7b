"""The header bar is readable in every built-in light theme (issue 22: textual-light drew dark navy on dark blue)."""

from __future__ import annotations

import asyncio

from textual.theme import BUILTIN_THEMES

from gaplens.tui.app import make_app
from tests.conftest import loaded
from tests.pilot import readings_ready
from tests.test_tui_themes import contrast

#: WCAG AA for large text and UI components: solarized-light's own body text reaches only 4.4:1.
MIN_CONTRAST = 3.0


def test_header_text_is_readable_in_every_builtin_light_theme():
    app = make_app(loaded("smells.json.gz"), mono=False)
    weak: list[str] = []
    seen: list[str] = []

    async def main() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await readings_ready(app, pilot)
            header = app.query_one("#header")
            for name, theme in BUILTIN_THEMES.items():
                if theme.ansi or theme.dark:
                    continue  # ansi: the terminal's own colours; dark themes keep $foreground (snapshots)
                app.theme = name
                await pilot.pause()
                style = header.rich_style
                assert style.color is not None and style.bgcolor is not None, name
                seen.append(name)
                ratio = contrast(style.color, style.bgcolor)
                if ratio < MIN_CONTRAST:
                    weak.append(f"{name}: {style.color.name} on {style.bgcolor.name} = {ratio:.2f}")

    asyncio.run(main())
    assert "textual-light" in seen and len(seen) >= 5
    assert not weak, "\n".join(weak)
