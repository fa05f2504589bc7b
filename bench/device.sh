#!/usr/bin/env bash
# Benchmark sections on a lent GPU host (a quiet machine; the dev box is shared), in one call:
#   bash bench/device.sh [CORES] [SECTION ...]     e.g. bash bench/device.sh 0,1 viewer analysis nvtx
# CORES pins every process to those cores (0,1: two, as on the dev box); SECTION defaults to load.
# BASE=DIR also runs each section on the code in DIR (a `git archive` of an older commit's code,
# without tests/ or samples/: they are linked from this checkout), the two trees alternating per
# section (ORDER="base now" to start with the older), so a before/after pair shares the machine's state.
# Needs, carried from the checkout: .whl/ (orjson, zlib-ng, textual and its pure-Python needs for the
# host's Python; see the device README for `pip download`) and .bench/ (copies of ../shared/samples'
# decode_eager.json.gz and nsys_decode_eager.sqlite.gz: the host only gets the checkout).
# Output: each run's log in $OUT/<tree>_<section>.log, and bench_load.json for load.
set -u
OUT=${OUT:-/tmp/out}
CORES=${1:-}
shift || true
SECTIONS=("${@:-load}")
mkdir -p "$OUT" ../shared/samples
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 GAPLENS_BENCH_JSON="$OUT/bench_load.json"
cp .bench/*.gz ../shared/samples/
python3 -c 'import numpy, pyarrow, orjson, textual, sys; print(sys.version.split()[0], "numpy", numpy.__version__, "pyarrow", pyarrow.__version__, "orjson", orjson.__version__, "textual", textual.__version__)'
echo "cores: $(nproc) online; pinned to ${CORES:-all}"
pin=()
[ -n "$CORES" ] && pin=(taskset -c "$CORES")
here=$PWD
if [ -n "${BASE:-}" ]; then
  for p in tests samples; do [ -e "$BASE/$p" ] || ln -s "$here/$p" "$BASE/$p"; done
  [ -e "$BASE/../shared" ] || ln -s "$here/../shared" "$BASE/../shared"  # where its bench looks for samples
fi
for s in "${SECTIONS[@]}"; do
  for tree in ${ORDER:-now ${BASE:+base}}; do
    dir=$here
    [ "$tree" = base ] && dir=$BASE
    echo "== $tree: $s (load $(cut -d' ' -f1-3 /proc/loadavg)) =="
    (cd "$dir" && "${pin[@]}" python3 -m bench "$s" 2>&1) | tee "$OUT/${tree}_$s.log"
  done
done
