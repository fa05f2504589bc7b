"""The one error a loader raises for input it cannot use."""

from __future__ import annotations

from gaplens.loaders.text import shorten


class TraceError(Exception):
    """Unusable input; the message is one clean line meant for the user (trace text in it is sanitised)."""

    def __init__(self, message: object = "") -> None:
        super().__init__(shorten(message, 600))
