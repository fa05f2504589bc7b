"""Text cut to a column's width without changing what it says: never mid-word, never mid-entry.

A name cut mid-word ("Memcpy HtoD (Pinned -> Devic") or a list cut mid-entry ("host 76%, launch 19%, sync 4%,",
"comm 2") reads as a different, or wrong, statement; the ellipsis says something was left out.
"""

from __future__ import annotations

from gaplens.loaders.text import clean_text

#: Characters after which a long name may be cut (word and template boundaries of kernel and op names).
_BREAKS = " (<,:"


def short_name(text: object, limit: int) -> str:
    """Clean one-line text of at most ``limit`` characters, cut at a word boundary with an ellipsis."""
    s = clean_text(text)
    if len(s) <= limit:
        return s
    head = s[: limit - 1]
    cut = max(head.rfind(c) for c in _BREAKS)
    if cut >= limit // 2:  # a boundary in the first half would drop most of the name: cut mid-word then
        head = head[:cut]
    return head.rstrip(_BREAKS) + "…"


def fit_entries(entries: list[str], limit: int, sep: str = ", ") -> str:
    """``entries`` joined by ``sep`` in at most ``limit`` characters: whole entries only, then "…"."""
    whole = sep.join(entries)
    if len(whole) <= limit:
        return whole
    out = ""
    for e in entries:
        nxt = f"{out}{sep}{e}" if out else e
        if len(nxt) + len(sep) + 1 > limit:
            break
        out = nxt
    return f"{out}{sep}…" if out else short_name(entries[0], limit)
