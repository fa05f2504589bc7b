"""Three-way merge of one trace's notes, so two windows saving the same file never lose each other's words.

A window remembers what the file held when it last read or wrote it (``base``). On
save it re-reads the file under a lock (``theirs``) and applies only its own changes
since ``base`` (``mine``)::

    base ──► mine     what this window added, edited, deleted
      └────► theirs   what other windows saved meanwhile
    merged = theirs + my changes

Notes are matched by ``uid``; answers and the experiment per step (mine wins only
where I changed it); marked phases as a set. Two windows that each add note 3 keep
both: the later writer's is renumbered.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gaplens.analysis.protocol.notes import MarkedPhase, Note, Notes


def merge(base: Notes, mine: Notes, theirs: Notes) -> Notes:
    """``theirs`` with the changes ``mine`` made since ``base``; the inputs are not modified.

    Notes and phases are frozen, so sharing them between lists is safe.
    """
    out = copy.copy(theirs)
    out.answers = _merge_answers(base.answers, mine.answers, theirs.answers)
    if mine.experiment != base.experiment:
        out.experiment = mine.experiment
    out.phases = _merge_phases(base.phases, mine.phases, theirs.phases)
    out.notes = _merge_notes(base.notes, mine.notes, theirs.notes)
    out.saved_at = max(mine.saved_at, theirs.saved_at)
    return out


def _merge_answers(base: dict[int, str], mine: dict[int, str], theirs: dict[int, str]) -> dict[int, str]:
    out = dict(theirs)
    for step in set(base) | set(mine):
        if mine.get(step) == base.get(step):
            continue  # not my change: theirs stands
        if step in mine:
            out[step] = mine[step]
        else:
            out.pop(step, None)
    return dict(sorted(out.items()))


def _phase_key(p: MarkedPhase) -> tuple:
    return (p.name, p.start_ns, p.end_ns, p.original)


def _merge_phases(base: list[MarkedPhase], mine: list[MarkedPhase], theirs: list[MarkedPhase]) -> list[MarkedPhase]:
    base_keys = {_phase_key(p) for p in base}
    mine_keys = {_phase_key(p) for p in mine}
    removed = base_keys - mine_keys
    out = [p for p in theirs if _phase_key(p) not in removed]
    have = {_phase_key(p) for p in out}
    out += [p for p in mine if _phase_key(p) not in base_keys and _phase_key(p) not in have]
    out.sort(key=lambda p: (p.start_ns, p.end_ns))
    return out


def _merge_notes(base: list[Note], mine: list[Note], theirs: list[Note]) -> list[Note]:
    base_by = {n.uid: n for n in base}
    mine_by = {n.uid: n for n in mine}
    removed = set(base_by) - set(mine_by)
    merged = {n.uid: n for n in theirs if n.uid not in removed}
    taken = {n.id for n in merged.values()}
    for uid, note in mine_by.items():
        if uid in base_by and (base_by[uid] is note or base_by[uid] == note):
            continue  # unchanged here: theirs (perhaps edited there) stands
        # An edit of what another window deleted brings it back: my words were acknowledged.
        ours = note
        if uid not in merged:
            if ours.id in taken:  # both windows numbered a new note alike
                ours = dataclasses.replace(ours, id=max(taken) + 1)
            taken.add(ours.id)
        elif ours.id != merged[uid].id:
            ours = dataclasses.replace(ours, id=merged[uid].id)
        merged[uid] = ours
    return sorted(merged.values(), key=lambda n: (n.start_ns, n.id))
