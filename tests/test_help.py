"""The help screen (?) lists every key: the viewer's from ``tui.keys``, the guided reading's from ``tui.protocol``."""

from __future__ import annotations

import asyncio
import html
import re

from gaplens.tui.app import make_app
from gaplens.tui.keys import KEYS, key_names
from gaplens.tui.protocol import PROTOCOL_KEYS
from tests.conftest import loaded
from tests.pilot import readings_ready

_TEXT = re.compile(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>')


def screen_lines(svg: str) -> list[str]:
    """The terminal rows of a Textual SVG screenshot as plain text (cells are 12.2 px wide)."""
    rows: dict[float, list[str]] = {}
    for x, y, text in _TEXT.findall(svg):
        line = rows.setdefault(float(y), [])
        col = round(float(x) / 12.2)
        line.extend(" " * (col - len(line)))
        line[col:] = html.unescape(text).replace("\xa0", " ")
    return ["".join(rows[y]) for y in sorted(rows)]


def test_help_screen_lists_the_viewer_and_protocol_keys():
    app = make_app(loaded("smells.json.gz"))
    lines: list[str] = []

    async def main() -> None:
        async with app.run_test(size=(120, 70)) as pilot:
            await readings_ready(app, pilot)
            await pilot.press("question_mark")
            assert type(app.screen).__name__ == "HelpScreen"
            lines.extend(screen_lines(app.export_screenshot()))

    asyncio.run(main())
    expected = [(key_names(keys), desc) for keys, _, desc, _ in KEYS]
    expected += [(key, title) for _, _, title, key in PROTOCOL_KEYS]
    assert {"]", "[", "e", "b", "B", "m", "E"} <= {key for key, _ in expected}
    for key, desc in expected:
        # The key and what it does, on one row of the table.
        assert any(re.search(rf"\s{re.escape(key)}\s+{re.escape(desc)}", line) for line in lines), (key, desc)
