#!/usr/bin/env bash
# Every round-3 recording in one call on one GPU (nvidia-h200), packed for the trip back:
#   bash tracegen/device_round3.sh [CASE,CASE,...]      (default: all cases of record_round3.py)
# Each case runs in its own process under `timeout`, so one failure loses only itself; the log says
# which. Results: $OUT/round3.tar (traces + meta + per-case logs; split in 15 MB parts if larger) and
# $OUT/log.txt.
set -u
OUT=${OUT:-/tmp/out}
W=/tmp/rec3
mkdir -p "$W" "$OUT"
export PYTHONUNBUFFERED=1
T=$(cd "$(dirname "$0")" && pwd)
cases=${1:-$(python3 "$T/record_round3.py" --case list | tr '\n' ',')}
BUDGET_S=${BUDGET_S:-480}  # stop starting new cases after this many seconds (the call's limit is 600)
start=$(date +%s)
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
  df -h /dev/shm /tmp | cat
  nproc
} 2>&1 | tee "$OUT/log.txt"
for c in ${cases//,/ }; do
  now=$(date +%s)
  if [ $((now - start)) -gt "$BUDGET_S" ]; then
    echo "== SKIP $c (budget: $((now - start)) s used)" | tee -a "$OUT/log.txt"
    continue
  fi
  echo "== $(date +%T) $c" | tee -a "$OUT/log.txt"
  timeout 150 python3 "$T/record_round3.py" --case "$c" --out "$W" >"$W/$c.log" 2>&1
  rc=$?
  grep -v '^USDT\|^STAGE:\|Warning: Profiler' "$W/$c.log" | tail -n 12 | cut -c1-600 | tee -a "$OUT/log.txt"
  echo "== $(date +%T) $c rc=$rc" | tee -a "$OUT/log.txt"
done
cd "$W" && ls -la | tee -a "$OUT/log.txt"
tar -cf "$OUT/round3.tar" ./*.json.gz ./*.meta.json ./*.log 2>/dev/null
if [ "$(stat -c %s "$OUT/round3.tar")" -gt 15000000 ]; then
  split -b 15000000 "$OUT/round3.tar" "$OUT/round3.tar.part-" && rm "$OUT/round3.tar"
fi
ls -la "$OUT"
