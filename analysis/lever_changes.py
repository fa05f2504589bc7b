"""Which what-if change models each lever's fix, so step 6 quotes the gain of the fix it proposes.

One table, lever (the experiment's cause group) → change (``analysis.whatif``):

    group       lever (analysis.levers)                          change
    launch      capture the step in a CUDA graph / fuse kernels  --graph step (where the step can be captured
                                                                 and is not graphed already; --remove sync --graph
                                                                 step where its syncs stand in the way), else
                                                                 --remove launch
    host        move CPU work off the step, feed the GPU ahead   --remove host (islands + the input pipeline's wait)
    sync        remove the synchronisation inside the loop       --remove sync (the host runs ahead)
    alloc       keep the caching allocator on / reuse buffers    --remove alloc
    copy        pageable: copy from pinned memory                --scale 'COPY=F', F from the copies' bytes and the
                                                                 host link (``PINNED_LINK_SHARE`` of its peak)
                pinned, DtoH, device: overlap / prefetch         --remove copy
    dependency, comm, device (kernels), warm-up                  none: the trace cannot say how much faster the
                                                                 awaited work, the peer or the kernel would be

A change the model cannot make for this trace (no steps, a phase that synchronises) is said in words.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from gaplens.analysis.alloc_sites import released_in_a_burst
from gaplens.analysis.floor.gpuspecs import gpu_matches
from gaplens.analysis.levers import allocator_off, copy_kinds, launches
from gaplens.analysis.steps import steps
from gaplens.analysis.units import fmt_ns
from gaplens.analysis.whatif import NO_GAIN_SHARE, Change, whatif
from gaplens.loaders.model import Kind, Trace

#: Share of the host link's one-way peak a pinned copy reaches: 54.6 GB/s of PCIe Gen5 x16's 64 GB/s for a
#: 512 MiB pinned HtoD copy on an H200 (round-3 floor_calib, CUDA events: 9.84 ms), i.e. 0.85.
PINNED_LINK_SHARE = 0.85
#: Said beside --remove alloc's prediction when device memory is allocated and freed every step (the caching
#: allocator off, or its cache emptied in the loop): the trace cannot show the rest of the fix
#: (tests/data/round5/README.md: round-4 alloc +70%, round-5 allocconv +45%, emptycache +29%; allocinfer +1%
#: where the device work is long). The fixed twins ran within the bound in all of them.
ALLOCATOR_OFF_NOTE = (
    "a bound: the step falls at least this far. With device memory allocated and freed every step (the caching "
    "allocator off, or its cache emptied) the rest of the host's work ran slower too in our recordings (pure "
    "host ops 1.2-2x, launch calls up to 1.7x their fixed twins'); what-if takes off only the memory-management "
    "calls, so a host-bound step gains more"
)
#: Why no prediction is quoted for groups the replay cannot change.
NO_MODEL = {
    "dependency": "what-if does not model how much sooner the awaited work could run: try `gaplens whatif "
    "--scale 'GLOB=F'` on the op waited on, with your own F",
    "comm": "what-if does not model a peer's arrival: read the job with gaplens ranks",
    "device": "what-if cannot know how much faster a kernel can run: `gaplens whatif --scale 'GLOB=F'` with "
    "your own F (the floor's efficiency bounds it)",
}


@dataclass(frozen=True)
class Quote:
    """The change that models a lever and what it predicts (or, with no change, why not)."""

    changes: tuple[Change, ...]
    measured_ns: int | None = None
    predicted_ns: int | None = None
    notes: tuple[str, ...] = ()
    why_not: str = ""
    label: str = ""  # what the change stands for, when a lever has two ("pinned and prefetched: ")

    @property
    def command(self) -> str:
        return " ".join(c.text() for c in self.changes)

    def lines(self) -> list[str]:
        """Step 6's sentences: the predicted step and what the change assumed, or why there is none."""
        if self.why_not:
            return [self.why_not]
        if self.measured_ns is None or self.predicted_ns is None:
            return []
        m, p = self.measured_ns, self.predicted_ns
        if m <= 0 or abs(m - p) < NO_GAIN_SHARE * m:
            why = next((n for n in self.notes if n.startswith("no gain")), "the change moves nothing that follows")
            return [f"what-if predicts no gain from `{self.command}`: {why}"]
        out = [f"{self.label}gaplens whatif {self.command}: {fmt_ns(m)} → {fmt_ns(p)} per step predicted"]
        extra = [n for n in self.notes[1:] if n == ALLOCATOR_OFF_NOTE]
        return out + list(self.notes[:1]) + extra


def changes_for(trace: Trace, group: str, copies: list[int] | None = None) -> tuple[list[Change], str]:
    """The change(s) that model the lever of ``group``, or none and why (see the module's table)."""
    if group in NO_MODEL:
        return [], NO_MODEL[group]
    if group == "launch":
        return launch_changes(trace), ""
    if group in ("host", "sync", "alloc"):
        return [Change("remove", group)], ""
    if group == "copy":
        pinned = pinned_scale(trace, copies)
        return ([pinned] if pinned is not None else [Change("remove", "copy")]), ""
    return [], ""


def launch_changes(trace: Trace) -> list[Change]:
    """``--graph step`` where the steps can be captured and the trace does not replay graphs already; where
    only their synchronisations stand in the way, ``--remove sync --graph step`` (a capture needs them gone
    first: the eager decode sample syncs ~5 times a step); else ``--remove launch`` (what fusing kernels or
    a graph of the launch loop alone takes away)."""
    if steps(trace) and not launches(trace).graphed:
        for changes in ([Change("graph", "step")], [Change("remove", "sync"), Change("graph", "step")]):
            if capturable(trace, changes):
                return changes
    return [Change("remove", "launch")]


def capturable(trace: Trace, changes: list[Change] | None = None) -> bool:
    """Whether ``--graph step`` (with ``changes``) accepts the trace's steps: no synchronisation left between
    their launches."""
    try:
        _replayed(trace, changes or [Change("graph", "step")])
    except ValueError:
        return False
    return True


#: Replays made for step 6, per live trace: asking whether the step can be graphed, then quoting that graph,
#: then asking what ``--remove host`` removes would otherwise replay the same change two or three times.
_RUNS: dict[int, tuple[weakref.ref, dict[tuple[Change, ...], dict | ValueError]]] = {}


def _replayed(trace: Trace, changes: list[Change]) -> dict:
    """``whatif(trace, changes)``, once per trace and changes (a refusal is remembered and raised again)."""
    key = id(trace)
    hit = _RUNS.get(key)
    if hit is None or hit[0]() is not trace:

        def forget(_: weakref.ref, key: int = key) -> None:  # the trace is gone: so are its replays
            _RUNS.pop(key, None)

        hit = (weakref.ref(trace, forget), {})
        _RUNS[key] = hit
    runs = hit[1]
    k = tuple(changes)
    if k not in runs:
        try:
            runs[k] = whatif(trace, changes)
        except ValueError as exc:
            runs[k] = exc
    got = runs[k]
    if isinstance(got, ValueError):
        raise got
    return got


def pinned_scale(trace: Trace, copies: list[int] | None = None) -> Change | None:
    """``--scale`` of the pageable copies to what pinned memory would take: each copy's bytes over
    ``PINNED_LINK_SHARE`` of the spec's host link, against its measured time (the median ratio over the
    copies of the most costly pageable name). None when no copy is pageable or the link is unknown."""

    kinds = [k for k in copy_kinds(trace, copies) if k.lever_key in ("pageable", "dtoh") and k.src and k.dst]
    if not kinds:
        return None
    matches = gpu_matches(trace)
    links = [m.spec.link_bytes_per_s for m in matches.values() if m.spec is not None and m.spec.link_bytes_per_s]
    if not links:
        return None
    top = kinds[0]
    name_ids = [i for i, nm in enumerate(trace.names) if f"({top.src} -> {top.dst})" in nm]
    host = np.isin(trace.kind, (int(Kind.MEMCPY_HTOD), int(Kind.MEMCPY_DTOH)))
    idx = np.flatnonzero(np.isin(trace.name_id, name_ids) & host & (trace.bytes > 0))
    if idx.size == 0:
        return None
    dur = (trace.end_ns[idx] - trace.start_ns[idx]).astype(np.float64)
    pinned = trace.bytes[idx] / (PINNED_LINK_SHARE * min(links)) * 1e9
    factor = float(np.median(np.clip(pinned / np.maximum(dur, 1.0), 0.0, 1.0)))
    names = sorted({trace.names[int(i)] for i in np.unique(trace.name_id[idx])})
    glob = names[0] if len(names) == 1 else f"*({top.src} -> {top.dst})*"
    return Change("scale", glob, round(factor, 3))


def quote(trace: Trace, group: str, copies: list[int] | None = None) -> Quote:
    """What the lever of ``group`` gains per step, by the change that models it."""
    changes, why = changes_for(trace, group, copies)
    if not changes:
        return Quote((), why_not=why)
    got = _predict(trace, changes)
    if group == "host" and got.changes and not got.why_not and _nothing_removed(trace):
        # no island and no input pipeline: the host group is the launch loop's short gaps
        got = _predict(trace, launch_changes(trace))
    if group == "alloc" and (allocator_off(trace) or released_in_a_burst(trace)):
        got = Quote(got.changes, got.measured_ns, got.predicted_ns, (*got.notes, ALLOCATOR_OFF_NOTE), got.why_not)
    return got


def quotes(trace: Trace, group: str, copies: list[int] | None = None) -> list[Quote]:
    """``quote``, and for pageable copies also the copies pinned *and* prefetched on a side stream: the
    lever names both (pinned, non_blocking; overlapped with compute), and they gain differently."""
    first = quote(trace, group, copies)
    if group != "copy" or not first.changes or first.changes[0].kind != "scale":
        return [first]
    both = _predict(trace, [*first.changes, Change("remove", "copy")], "pinned and prefetched on a side stream: ")
    return [Quote(first.changes, first.measured_ns, first.predicted_ns, first.notes, first.why_not, "pinned: "), both]


def _nothing_removed(trace: Trace) -> bool:
    r = _replayed(trace, [Change("remove", "host")])
    d = r["changes"][0]
    return d["regions"] == 0 and not d.get("pipeline_ns")


def _predict(trace: Trace, changes: list[Change], label: str = "") -> Quote:
    try:
        r = _replayed(trace, changes)
    except ValueError as exc:
        return Quote(tuple(changes), why_not=f"what-if cannot model this lever here: {exc}")
    st = r["steps"]
    if st["measured_median_ns"] is None:
        return Quote(tuple(changes), why_not="the trace has no steps: no per-step prediction")
    notes = tuple(n for n in r["notes"] if n.startswith(("no gain", "--")))
    return Quote(tuple(changes), int(st["measured_median_ns"]), int(st["predicted_median_ns"]), notes, "", label)
