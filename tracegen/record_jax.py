#!/usr/bin/env python3
"""Record a JAX profile of a small jitted training step, for the XSpace and JAX trace-JSON loaders.

One process, one GPU (or the CPU when JAX has no GPU): an MLP's jitted train step (forward, loss,
grad, SGD update) runs 3 warm-up steps, then 6 profiled steps, each inside
``jax.profiler.StepTraceAnnotation("train", step_num=i)``, with a ``TraceAnnotation("data")``
host range and a blocking ``float(loss)`` every step (a sync). ``jax.profiler.trace`` writes
``plugins/profile/<run>/<host>.xplane.pb`` and, with ``create_perfetto_trace=True``,
``perfetto_trace.json.gz`` beside it. Both are copied to OUTDIR as ``jax_train.xplane.pb`` and
``jax_train.perfetto_trace.json.gz``, with ``jax_train.meta.json`` (versions, devices, wall-clock
step times). Usage: ``python3 tracegen/record_jax.py OUTDIR``.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import shutil
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np


def init(key, sizes):
    params = []
    for a, b in itertools.pairwise(sizes):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (a, b), jnp.float32) * (1 / np.sqrt(a)), jnp.zeros((b,), jnp.float32)))
    return params


def loss_fn(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = jax.nn.relu(h @ w + b)
    w, b = params[-1]
    return jnp.mean((h @ w + b - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return [(w - 1e-3 * gw, b - 1e-3 * gb) for (w, b), (gw, gb) in zip(params, grads, strict=True)], loss


def main(out: str) -> int:
    os.makedirs(out, exist_ok=True)
    sizes = [512, 1024, 1024, 256]
    params = init(jax.random.PRNGKey(0), sizes)
    rng = np.random.default_rng(0)

    def batch():
        with jax.profiler.TraceAnnotation("data"):
            x = rng.standard_normal((256, sizes[0]), np.float32)
            y = rng.standard_normal((256, sizes[-1]), np.float32)
            return jax.device_put(x), jax.device_put(y)

    for _ in range(3):
        x, y = batch()
        params, loss = train_step(params, x, y)
        float(loss)
    logdir = tempfile.mkdtemp(prefix="jaxprof")
    times = []
    with jax.profiler.trace(logdir, create_perfetto_trace=True):
        for i in range(6):
            t0 = time.perf_counter()
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                x, y = batch()
                params, loss = train_step(params, x, y)
                float(loss)
            times.append(time.perf_counter() - t0)
    planes = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    perfetto = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*perfetto_trace.json.gz"))
    print("wrote", planes, perfetto)
    shutil.copy(planes[0], os.path.join(out, "jax_train.xplane.pb"))
    if perfetto:
        shutil.copy(perfetto[0], os.path.join(out, "jax_train.perfetto_trace.json.gz"))
    meta = {
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        "backend": jax.default_backend(),
        "steps": 6,
        "step_wall_ms": [round(t * 1e3, 3) for t in times],
        "mlp": sizes,
        "batch": 256,
    }
    with open(os.path.join(out, "jax_train.meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "jax_out"))
