#!/usr/bin/env bash
# Every round-5 recording in one call on one GPU (nvidia-h200): device_round4.sh's loop over
# record_round5.py's cases; allocinfer_fault and allocconv_fault get PYTORCH_NO_CUDA_MEMORY_CACHING=1.
#   bash tracegen/device_round5.sh [CASE,CASE,...]      (results: $OUT/round5.tar and $OUT/log.txt)
exec env RECORDER=record_round5.py ROUND=5 NO_CACHE_CASES="allocinfer_fault allocconv_fault" \
    bash "$(dirname "$0")/device_round4.sh" "$@"
