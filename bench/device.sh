#!/usr/bin/env bash
# `python -m bench load` on a lent GPU host (the machine users open traces on), in one call:
#   bash bench/device.sh [CORES]   e.g. CORES=0,1 pins every process to two cores, as on the dev box
# Needs, carried from the checkout: .whl/ (orjson for the host's Python, which lacks it; see the
# device README for `pip download`) and .bench/decode_eager.json.gz (../shared/samples' copy: the
# host only gets the checkout). Output: the benchmark's table, and $OUT/bench_load.json.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" ../shared/samples
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 GAPLENS_BENCH_JSON="$OUT/bench_load.json"
cp .bench/decode_eager.json.gz ../shared/samples/
python3 -c 'import numpy, pyarrow, orjson, sys; print(sys.version.split()[0], "numpy", numpy.__version__, "pyarrow", pyarrow.__version__, "orjson", orjson.__version__)'
echo "cores: $(nproc) online; pinned to ${1:-all}"
if [ -n "${1:-}" ]; then
  exec taskset -c "$1" python3 -m bench load
fi
exec python3 -m bench load
