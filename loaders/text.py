"""One sanitiser for trace text on its way to any sink: terminal, stderr, Markdown, SVG, JSON.

Trace text is untrusted: a name can carry an OSC 52 clipboard write, a screen clear,
a window-title change, an 8-bit CSI, a lone surrogate (which crashes the encoder of
``print``) or bidi overrides that reorder what is shown. ``clean_text`` removes all
of them once, where text enters the model, so no widget, command or exporter has to
remember to. Rich markup such as ``[bold]`` is left as text: sinks show it literally.
"""

from __future__ import annotations

import re

# Whole escape sequences first, so their parameters (``0;title``) do not survive as text.
_SEQUENCE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, screen clears
    r"|\x9b[0-?]*[ -/]*[@-~]"  # the same, 8-bit
    r"|[\x1b][\]PX^_][^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c)"  # OSC, DCS, SOS, PM, APC up to BEL/ST
    r"|[\x90\x98\x9d\x9e\x9f][^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c)"  # the same, 8-bit
    r"|\x1b[ -/]*[0-~]"  # other escapes: ESC c (reset), charset designations
)
# What is left: single control characters, lone surrogates, bidi overrides, line separators.
_SINGLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_ANY = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def _single(m: re.Match[str]) -> str:
    ch = m.group(0)
    if "\ud800" <= ch <= "\udfff":
        return "\ufffd"  # a lone surrogate: keep that something was there
    return " " if ch in "\u2028\u2029" else ""


def clean_text(value: object, keep_newlines: bool = False) -> str:
    """``value`` as printable text: escape sequences and control characters removed.

    Tabs and newlines become spaces (one line per value) unless ``keep_newlines``,
    which keeps ``\\n`` for multi-line notes. Lone surrogates become U+FFFD.
    Non-strings are converted first (bytes decoded as UTF-8 with replacement).
    """
    if isinstance(value, bytes | bytearray):
        text = bytes(value).decode("utf-8", "replace")
    else:
        text = value if isinstance(value, str) else str(value)
    if _ANY.search(text) is None:
        return text
    text = _SEQUENCE.sub("", text)
    if keep_newlines:
        text = text.replace("\r\n", "\n").replace("\t", " ")
        lines = text.split("\n")
        return "\n".join(_SINGLE.sub(_single, line) for line in lines)
    text = text.replace("\t", " ").replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    return _SINGLE.sub(_single, text)


def shorten(value: object, limit: int = 80) -> str:
    """Clean one-line text cut to ``limit`` characters (with an ellipsis), for error messages."""
    text = clean_text(value)
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"
