"""The floor reading as it is read: ``floor --json``, the GPU row, the statistics screen's column, the DataFrame.

The floor per op is ``floors``; over windows (op families, phases, the step) ``windows``; copies
against the link ``copies``; the lever ``lever``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gaplens.analysis.floor.copies import copy_rows
from gaplens.analysis.floor.floors import floors
from gaplens.analysis.floor.lever import floor_lever
from gaplens.analysis.floor.windows import op_rows, phase_rows, span_row, step_row
from gaplens.analysis.steps import steps
from gaplens.loaders.model import Trace

if TYPE_CHECKING:
    import pandas as pd


def gpu_json(trace: Trace, gpu_spec: str | None = None) -> dict | None:
    """The contract's ``gpu`` object: the first device with GPU work (and its spec row, or null)."""
    f = floors(trace, gpu_spec)
    devs = sorted({int(d) for d in trace.device_of_event()[f.gpu].tolist()}) or [d.id for d in trace.meta.devices]
    if not devs:
        return None
    m = f.matches.get(devs[0])
    name = m.device_name if m else ""
    spec = m.spec if m else None
    return {
        "device": devs[0],
        "name": name,
        "spec": spec.to_json() if spec else None,
        "peak_flops": dict(spec.peak_flops) if spec else {},
        "mem_bytes_per_s": spec.mem_bytes_per_s if spec else None,
        "link_bytes_per_s": spec.link_bytes_per_s if spec else None,
        "why": (m.why if m else "the trace names no GPU") if not spec else "",
        "devices": [
            {"device": d, "name": mm.device_name, "spec": mm.spec.key if mm.spec else None}
            for d, mm in f.matches.items()
        ],
    }


def floor_json(trace: Trace, gpu_spec: str | None = None) -> dict:
    """``floor --json``: the DESIGN.md contract plus ``copies`` and ``notes``."""
    f = floors(trace, gpu_spec)
    ops = op_rows(trace, gpu_spec)
    keep = (
        "name",
        "kernel",
        "dtype",
        "count",
        "time_ns",
        "flops",
        "bytes",
        "floor_ns",
        "bound",
        "efficiency",
        "shape",
        "unsized_ns",
    )
    total = span_row(trace, np.arange(f.gpu.size), gpu_spec)
    notes = []
    if f.why:
        notes.append(f.why)
    for m in f.matches.values():
        if m.spec is None:
            notes.append(f"GPU {m.device} ({m.device_name}): {m.why}; FLOPs and bytes are shown without a floor")
    return {
        "origin_ns": int(trace.meta.origin_ns),
        "gpu": gpu_json(trace, gpu_spec),
        "ops": [{k: r[k] for k in keep} for r in ops],
        "phases": phase_rows(trace, gpu_spec),
        "step": step_row(trace, gpu_spec),
        "total": total,
        "copies": copy_rows(trace, gpu_spec),
        "unsized_ns": total["unsized_ns"],
        "lever": _lever_json(trace, gpu_spec),
        "notes": notes,
    }


def _lever_json(trace: Trace, gpu_spec: str | None) -> dict | None:
    """``floor_lever`` over the steady steps when the trace has a step, else over the whole trace."""
    window: tuple[int | None, int | None, int | None] = (None, None, None)
    where = "the whole trace"
    st = steps(trace)
    if st and st.steady:
        a, b = st.steady[0], st.steady[-1]
        window = (st.spans[a][0], st.spans[b][1], st.pid)
        where = f"{st.names[a]} to {st.names[b]}"  # the first to the last steady step
    got = floor_lever(trace, *window, gpu_spec=gpu_spec)
    return None if got is None else {**got.__dict__, "window": where}


def name_floor_pct(trace: Trace, name_ids: np.ndarray, gpu_spec: str | None = None) -> np.ndarray:
    """Floor as a percentage of measured time per GPU-op name (the statistics screen's column), over the
    name's sized instances; NaN where none is sized."""
    f = floors(trace, gpu_spec)
    ok = f.sized
    ids = trace.name_id[f.gpu[ok]]
    size = int(max(int(name_ids.max(initial=-1)), int(ids.max(initial=-1)))) + 1
    floor = np.bincount(ids, weights=f.floor_ns[ok], minlength=size)
    time = np.bincount(ids, weights=f.time_ns[ok], minlength=size)
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = np.where(time > 0, 100.0 * floor / time, np.nan)
    return pct[name_ids]


def floor_frame(trace: Trace, gpu_spec: str | None = None) -> pd.DataFrame:
    """The per-op table as a pandas DataFrame (one row per op family and dtype)."""
    import pandas as pd

    return pd.DataFrame(op_rows(trace, gpu_spec))
