"""Whether a file is an XSpace, from its name or first bytes (no decoding, nothing imported)."""

from __future__ import annotations

SUFFIXES = (".xplane.pb", ".xplane.pb.gz", ".pb")
_CONTROL = frozenset(range(9)) | frozenset(range(14, 32))


def looks_like_xplane(path: str, body: bytes) -> bool:
    """By name, or by field 1 (planes) as a length-delimited record (0x0a) followed by binary protobuf.

    JSON can start with 0x0a too (a newline), but JSON text holds no control bytes, while an XSpace's
    first plane has tags and varints below 0x20 at once.
    """
    if path.endswith(SUFFIXES):
        return True
    return body[:1] == b"\x0a" and any(c in _CONTROL for c in body[1:64])
