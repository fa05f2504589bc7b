#!/usr/bin/env bash
# Every round-4 recording in one call on one GPU (nvidia-h200), packed for the trip back:
#   bash tracegen/device_round4.sh [CASE,CASE,...]      (default: all cases of record_round4.py)
# Each case runs in its own process under `timeout`, so one failure loses only itself; the log says
# which. alloc_fault's process gets PYTORCH_NO_CUDA_MEMORY_CACHING=1 in its environment (the caching
# allocator off from CUDA's start). Results: $OUT/round$ROUND.tar (traces + meta + per-case logs; split in
# 15 MB parts if larger) and $OUT/log.txt.
set -u
OUT=${OUT:-/tmp/out}
RECORDER=${RECORDER:-record_round4.py}  # device_round5.sh runs this loop over its own recorder
ROUND=${ROUND:-4}
NO_CACHE_CASES=${NO_CACHE_CASES:-alloc_fault}  # cases whose process starts with the caching allocator off
W=/tmp/rec$ROUND
mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1
T=$(cd "$(dirname "$0")" && pwd)
cases=${1:-$(python3 "$T/$RECORDER" --case list | tr '\n' ',')}
BUDGET_S=${BUDGET_S:-420}  # stop starting new cases after this many seconds (the call's limit is 600)
start=$(date +%s)
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  nproc
} 2>&1 | tee "$OUT/log.txt"
for c in ${cases//,/ }; do
  now=$(date +%s)
  if [ $((now - start)) -gt "$BUDGET_S" ]; then
    echo "== SKIP $c (budget: $((now - start)) s used)" | tee -a "$OUT/log.txt"
    continue
  fi
  lim=100
  case $c in postproc_*) lim=200 ;; esac
  envs=()
  case " $NO_CACHE_CASES " in *" $c "*) envs=(PYTORCH_NO_CUDA_MEMORY_CACHING=1) ;; esac
  echo "== $(date +%T) $c" | tee -a "$OUT/log.txt"
  env "${envs[@]}" timeout "$lim" python3 "$T/$RECORDER" --case "$c" --out "$W" >"$W/$c.log" 2>&1
  rc=$?
  grep -v '^USDT\|^STAGE:\|Warning: Profiler' "$W/$c.log" | tail -n 8 | cut -c1-900 | tee -a "$OUT/log.txt"
  echo "== $(date +%T) $c rc=$rc" | tee -a "$OUT/log.txt"
done
cd "$W" && ls -la | tee -a "$OUT/log.txt"
tar -cf "$OUT/round$ROUND.tar" ./*.json.gz ./*.meta.json ./*.log 2>/dev/null
if [ "$(stat -c %s "$OUT/round$ROUND.tar")" -gt 15000000 ]; then
  split -b 15000000 "$OUT/round$ROUND.tar" "$OUT/round$ROUND.tar.part-" && rm "$OUT/round$ROUND.tar"
fi
ls -la "$OUT"
