#!/usr/bin/env bash
# Every recording of round 2, in one call on a 2-GPU machine (nvidia-h200-x2), packed for the trip back:
#   bash tracegen/device_round2.sh [kineto|nsys|all]
# Kineto: DDP per rank (even, a planted straggler before an all_to_all, a planted straggler in the
# all-reduce), a toy server with idle time, and the every-profiler-option trace. nsys: the straggler
# DDP run (both processes in one report) and the server, exported to SQLite with `nsys stats` beside.
# Each recording may fail on its own; the log says which. Results: $OUT/rec.tar (+ log.txt).
set -u
OUT=${OUT:-/tmp/out}
W=/tmp/rec
mkdir -p "$W" "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
T=$(cd "$(dirname "$0")" && pwd)
what=${1:-all}
log() { echo "== $(date +%T) $*"; }
rec() { log "$*"; timeout 300 "$@" >"$W/last.log" 2>&1; rc=$?; tail -n 15 "$W/last.log"; log "rc=$rc"; }

nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'

if [ "$what" != nsys ]; then
  rec torchrun --nproc_per_node=2 "$T/record_ddp.py" --out "$W" --name ddp_even
  rec torchrun --nproc_per_node=2 "$T/record_ddp.py" --out "$W" --name ddp_straggler --straggler-ms 20
  rec torchrun --nproc_per_node=2 "$T/record_ddp.py" --out "$W" --name ddp_allreduce_straggler --straggler-ms 15 --no-exchange
  rec python3 "$T/record_serving.py" --out "$W" --name serving
  rec python3 "$T/record_serving.py" --out "$W" --name options_all --all-options --requests 2 --steps 16
fi

if [ "$what" != kineto ]; then
  NSYS=$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -n 1)
  IMPORTER=$(find /opt/nvidia -name QdstrmImporter -type f 2>/dev/null | head -n 1)
  # The importer needs elfutils' libdw, which the image lacks: carry Debian's libdw1 and libelf1
  # as .deb files in .deb/ (apt-get download libdw1 libelf1) and unpack them aside.
  if [ -d "$T/../.deb" ]; then
    for f in "$T"/../.deb/*.deb; do dpkg -x "$f" /tmp/libdw; done
    export LD_LIBRARY_PATH=/tmp/libdw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
  fi
  log "nsys=$NSYS importer=$IMPORTER"
  for cap in ddp serving; do
    if [ $cap = ddp ]; then
      cmd=(torchrun --nproc_per_node=2 "$T/record_ddp.py" --out "$W" --name nsys_ddp_straggler --straggler-ms 20 --no-torch-profiler)
      name=nsys_ddp_straggler
    else
      cmd=(python3 "$T/record_serving.py" --out "$W" --name nsys_serving --no-torch-profiler)
      name=nsys_serving
    fi
    rec "$NSYS" profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --force-overwrite=true -o "$W/$name" "${cmd[@]}"
    ls -la "$W" | grep "$name"
    if [ ! -f "$W/$name.nsys-rep" ] && [ -f "$W/$name.qdstrm" ] && [ -n "$IMPORTER" ]; then
      rec "$IMPORTER" --input-file "$W/$name.qdstrm"
    fi
    if [ -f "$W/$name.nsys-rep" ]; then
      rec "$NSYS" export --type=sqlite --force-overwrite=true -o "$W/$name.sqlite" "$W/$name.nsys-rep"
      if [ -f "$W/$name.sqlite" ]; then
        mkdir -p "$W/$name.reference"
        for r in cuda_gpu_kern_sum cuda_api_sum nvtx_sum; do
          "$NSYS" stats --report $r --format csv --force-export=false -o "$W/$name.reference/$r" "$W/$name.sqlite" >/dev/null 2>&1
        done
        gzip -9 "$W/$name.sqlite"
      fi
    fi
  done
fi

cd "$W" && ls -la && tar -cf "$OUT/rec.tar" ./*.json.gz ./*.meta.json ./*.sqlite.gz ./*.reference 2>/dev/null
if [ "$(stat -c %s "$OUT/rec.tar")" -gt 15000000 ]; then
  split -b 15000000 "$OUT/rec.tar" "$OUT/rec.tar.part-" && rm "$OUT/rec.tar"
fi
ls -la "$OUT"
