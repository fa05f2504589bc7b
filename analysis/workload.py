"""Step 1 of the reading protocol: what the trace itself knows about the workload.

GPU name and count, CUDA / framework versions, a dtype hint, recorded input shapes
and step counts from range names. The user completes model, batch, prompt and
output length; everything here is a fact with its source, never a guess dressed up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from gaplens.analysis.comm import comm_mask
from gaplens.analysis.memo import per_trace
from gaplens.analysis.step_names import numbered
from gaplens.analysis.steps import steps
from gaplens.loaders.kineto.opdetail import dims_part
from gaplens.loaders.model import Kind, Trace

_TRAINING = re.compile(r"backward|autograd|optimizer|\btrain|zero_grad", re.IGNORECASE)
#: Words (between non-letters) that only an LLM server or generation loop names its ranges with. Whole
#: words: "infer" in nvFuser's ``inferOutputShape…``, "serv" in ``preserve`` and "sampl" in a test's
#: ``sample_inputs`` made an nvFuser pytest run "LLM serving".
_SERVING = re.compile(
    r"(?<![a-z])(decode|decoding|prefill|generate|generation|detokeni[sz]e|tokeni[sz]e|request)(?![a-z])",
    re.IGNORECASE,
)
#: Kernels only serving engines run (paged KV-cache attention, split-KV decoding).
_SERVING_KERNELS = re.compile(r"paged_attention|splitkv|flash_fwd_splitkv|reshape_and_cache", re.IGNORECASE)
_PYTORCH = re.compile(r"^(aten::|torch|autograd::|c10d::)")

#: dtype tokens as they appear in kernel names (templates, cuBLAS/cuDNN/CUTLASS names).
DTYPE_TOKENS = (
    ("fp8", re.compile(r"e4m3|e5m2|fp8|Float8", re.IGNORECASE)),
    ("bf16", re.compile(r"BFloat16|bfloat16|bf16", re.IGNORECASE)),
    # Not a bare "f16": cuDNN's generated kernels say f16 for bf16 runs too.
    ("fp16", re.compile(r"c10::Half|__half\b|\bhalf\b|fp16", re.IGNORECASE)),
    ("tf32", re.compile(r"tf32", re.IGNORECASE)),
)

#: Ops whose input shapes say most about the workload (batch, sequence, hidden size).
SHAPE_OPS = re.compile(
    r"^aten::(linear|mm|addmm|bmm|matmul|baddbmm|conv\w*|embedding|scaled_dot_product_attention|"
    r"_scaled_dot_product\w*|layer_norm|rms_norm|softmax|_softmax)$"
)


@dataclass
class StepFamily:
    """The trace's step (``analysis.steps``) as step 1 states it: ``decode_step 0..31``, its median."""

    label: str
    count: int
    first: int
    last: int
    median_ns: int = 0
    mean_ns: int = 0  # over the steady steps, like the median
    warmup: list[str] = field(default_factory=list)


@dataclass
class Workload:
    gpus: list[dict] = field(default_factory=list)  # {id, name, sms, memory_bytes}
    versions: dict[str, str] = field(default_factory=dict)
    framework: str = ""
    dtype: str = ""
    dtype_source: str = ""
    shapes: list[dict] = field(default_factory=list)  # {op, dims, count}
    steps: list[StepFamily] = field(default_factory=list)
    source: str = ""
    kind: str = "generic"  # one of analysis.words.WORKLOADS: which levers fit

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def iterations(self) -> StepFamily | None:
        """The trace's step: what "N decode steps" refers to."""
        return self.steps[0] if self.steps else None

    def facts(self) -> list[str]:
        """One line per known fact, ready for the protocol panel and the report."""
        lines = []
        if self.gpus:
            names: dict[str, int] = {}
            for g in self.gpus:
                names[g["name"]] = names.get(g["name"], 0) + 1
            hw = ", ".join(f"{n} × {name}" for name, n in names.items())
            extra = ""
            first = self.gpus[0]
            if first.get("sms"):
                extra += f", {first['sms']} SMs"
            if first.get("memory_bytes"):
                extra += f", {first['memory_bytes'] / 2**30:.0f} GiB"
            lines.append(f"hardware: {hw}{extra}")
        else:
            lines.append("hardware: no GPU recorded in the trace")
        if self.framework:
            lines.append(f"framework: {self.framework}")
        if self.versions:
            lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in self.versions.items()))
        if self.dtype:
            lines.append(f"dtype: {self.dtype} ({self.dtype_source})")
        for s in self.shapes[:4]:
            lines.append(f"shapes: {s['op']} {s['dims']} ×{s['count']}")
        for fam in self.steps:
            timing = f", median {_ms(fam.median_ns)}" if fam.median_ns else ""
            if fam.warmup:
                timing += f" ({len(fam.warmup)} warm-up set apart)"
            lines.append(f"steps: {fam.count} × {fam.label} ({fam.first}..{fam.last}){timing}")
        return lines

    def to_dict(self) -> dict:
        return {
            "gpus": self.gpus,
            "gpu_count": self.gpu_count,
            "versions": self.versions,
            "framework": self.framework,
            "dtype": self.dtype,
            "dtype_source": self.dtype_source,
            "shapes": self.shapes,
            "steps": [vars(f) for f in self.steps],
            "source": self.source,
        }


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.2f} ms"


def workload(trace: Trace) -> Workload:
    """Everything step 1 can prefill from the trace."""
    meta = trace.meta
    w = Workload(source=meta.source_version or meta.source_format)
    for dev in meta.devices:
        props = dev.properties or {}
        w.gpus.append(
            {
                "id": dev.id,
                "name": dev.name,
                "sms": int(props.get("numSms") or props.get("multiProcessorCount") or 0),
                "memory_bytes": int(props.get("totalGlobalMem") or props.get("totalMemory") or 0),
            }
        )
    w.versions = versions(meta.extra)
    w.framework = framework(trace)
    w.dtype, w.dtype_source = dtype_hint(trace)
    w.shapes = input_shapes(trace)
    w.steps = step_families(trace)
    w.kind = kind(trace)
    return w


@per_trace
def kind(trace: Trace) -> str:
    """What kind of program the trace shows: ``training``, ``serving`` (LLM decode/serving), ``hpc``
    (GPU work from no framework) or ``generic``; the levers gaplens proposes depend on it.

    Read from the names the program left: ranges, thread names (autograd's own thread), CPU ops.
    """
    ranges = trace.kind == int(Kind.ANNOTATION)
    ops = trace.kind == int(Kind.CPU_OP)
    range_names = [trace.names[int(i)] for i in np.unique(trace.name_id[ranges]).tolist()]
    op_names = [trace.names[int(i)] for i in np.unique(trace.name_id[ops]).tolist()]
    threads = list(trace.meta.threads.values())
    if any(_TRAINING.search(n) for n in range_names + threads) or any("Backward" in n for n in op_names):
        return "training"
    kernels = [trace.names[int(i)] for i in np.unique(trace.name_id[trace.kind == int(Kind.KERNEL)]).tolist()]
    if any(_SERVING.search(n) for n in range_names) or any(_SERVING_KERNELS.search(n) for n in kernels):
        return "serving"
    if not op_names and not any(_PYTORCH.search(n) for n in trace.names[:50000]) and kernels:
        return "hpc"
    return "generic"


def versions(extra: dict) -> dict[str, str]:
    """CUDA runtime/driver, CUPTI and any framework version the writer recorded."""
    out: dict[str, str] = {}
    for key, label in (("cuda_runtime_version", "CUDA runtime"), ("cuda_driver_version", "CUDA driver")):
        v = extra.get(key)
        if isinstance(v, int) and v > 0:
            # CUDA encodes 12.9 as 12090 and 13.0 as 13000.
            out[label] = f"{v // 1000}.{(v % 1000) // 10}"
    cupti = extra.get("cupti_version")
    if isinstance(cupti, int) and cupti > 0:
        # Recent CUPTI writes 130001 for 13.0.1; older ones an API number (18, 28).
        out["CUPTI"] = f"{cupti // 10000}.{(cupti // 100) % 100}.{cupti % 100}" if cupti >= 10000 else f"API {cupti}"
    for key, value in extra.items():
        lowered = str(key).lower()
        if key in ("cuda_runtime_version", "cuda_driver_version", "cupti_version", "schemaVersion"):
            continue
        if any(tok in lowered for tok in ("torch", "nsys", "cuda", "driver", "framework")) and isinstance(
            value, str | int | float
        ):
            out[str(key)] = str(value)[:60]
    return out


def framework(trace: Trace) -> str:
    """PyTorch when the trace holds aten ops (Kineto writes no torch version)."""
    extra = trace.meta.extra
    for key in ("pytorch_version", "torch_version", "framework_version"):
        if extra.get(key):
            return f"PyTorch {extra[key]}"
    if any(n.startswith("aten::") for n in trace.names[:20000]):
        return "PyTorch (version not recorded in the trace)"
    return ""


def dtype_hint(trace: Trace) -> tuple[str, str]:
    """The dtype that most kernel time runs in, read from kernel names."""
    k = np.flatnonzero((trace.kind == int(Kind.KERNEL)) & ~comm_mask(trace))  # collectives name no model dtype
    if k.size == 0:
        return "", ""
    dur = np.bincount(trace.name_id[k], weights=trace.end_ns[k] - trace.start_ns[k], minlength=len(trace.names))
    totals = dict.fromkeys([t for t, _ in DTYPE_TOKENS], 0.0)
    for nid in np.flatnonzero(dur).tolist():
        name = trace.names[nid]
        for token, rx in DTYPE_TOKENS:
            if rx.search(name):
                totals[token] += float(dur[nid])
                break
    grand = float(dur.sum())
    best = max(totals, key=lambda t: totals[t])
    if totals[best] <= 0 or grand <= 0:
        return "", ""
    return best, f"named by kernels holding {100 * totals[best] / grand:.0f}% of kernel time"


def input_shapes(trace: Trace, top: int = 6) -> list[dict]:
    """Most frequent (op, Input Dims) pairs of the ops that reveal batch and sizes."""
    # An op's detail holds its other recorded args after the dims (``opdetail``): ops with the same
    # dims count together whatever those hold.
    dims_ids: dict[str, int] = {}
    of_detail = np.full(len(trace.details), -1, dtype=np.int64)
    for i, d in enumerate(trace.details):
        if d.startswith("Input Dims "):
            of_detail[i] = dims_ids.setdefault(dims_part(d), len(dims_ids))
    if not dims_ids:
        return []
    texts = list(dims_ids)
    op_ids = np.asarray([i for i, n in enumerate(trace.names) if SHAPE_OPS.match(n)], dtype=np.int64)
    dims = of_detail[trace.detail_id]
    m = (dims >= 0) & (trace.kind == int(Kind.CPU_OP))
    if op_ids.size:
        m &= np.isin(trace.name_id, op_ids)
    if not m.any():
        return []
    key = trace.name_id[m].astype(np.int64) * (len(texts) + 1) + dims[m]
    uniq, counts = np.unique(key, return_counts=True)
    out = []
    for j in np.argsort(-counts, kind="stable").tolist():
        name_id, dims_id = divmod(int(uniq[j]), len(texts) + 1)
        shape = texts[dims_id].removeprefix("Input Dims ")
        if not re.search(r"\d", shape):
            continue  # all scalars: says nothing about sizes
        out.append({"op": trace.names[name_id], "dims": shape, "count": int(counts[j])})
        if len(out) >= top:
            break
    return out


def step_families(trace: Trace) -> list[StepFamily]:
    """The trace's step (``analysis.steps``, the one definition) as a fact: [] when it has none."""
    st = steps(trace)
    if not st:
        return []
    counts = [c for c in (numbered(n) for n in st.names) if c is not None]
    nums = [c[1] for c in counts] or [0]
    dur = [st.spans[k][1] - st.spans[k][0] for k in st.steady]
    return [
        StepFamily(
            label=st.label,
            count=st.count,
            first=min(nums),
            last=max(nums),
            median_ns=st.median_ns,
            mean_ns=int(np.mean(dur)) if dur else 0,
            warmup=st.warmup,
        )
    ]
