"""Step names: which range names carry a count (``step 3``), the family they fold to, and the profiler's step marker.

``analysis.phases`` folds names for display and sets the marker apart from the user's phases;
``analysis.steps`` finds the step among the numbered families. Both read these rules, so both import
this module, and ``steps`` stands on ``phases``.
"""

from __future__ import annotations

import functools
import re

#: A name with a trailing count separated from it (optionally followed by a parenthesised tag:
#: ``iteration 1 (profiled)``). The separator is what tells ``step 2`` from ``compile2``.
NUMBERED = re.compile(r"^(?P<prefix>.*?\S)(?:\s*[#_.:-]\s*|\s+)(?P<n>\d+)(?P<suffix>\s*\(.*\))?$")
#: The profiler's own step marker (a user annotation in recent Kineto, an operator in old ones).
PROFILER_STEP = re.compile(r"^ProfilerStep#(?P<n>\d+)$")


#: Distinct names remembered by ``numbered`` and ``family``: 100k NVTX ranges carry a few hundred names, and
#: the smells' roll-up, the steps and the levers asked the regular expression once per range (400k matches).
NAMES_REMEMBERED = 1 << 16


@functools.lru_cache(maxsize=NAMES_REMEMBERED)
def numbered(name: str) -> tuple[str, int] | None:
    """(family, count) of a numbered name, None when the name carries no separated count."""
    m = NUMBERED.match(name.strip())
    if m is None:
        return None
    return (m.group("prefix") + (m.group("suffix") or "")).strip(), int(m.group("n"))


@functools.lru_cache(maxsize=NAMES_REMEMBERED)
def family(name: str) -> str:
    """The name with its trailing count dropped (``decode_step 7`` -> ``decode_step``), for display."""
    hit = numbered(name)
    return name.strip() if hit is None else hit[0]
