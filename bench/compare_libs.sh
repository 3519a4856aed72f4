#!/usr/bin/env bash
# Before/after: the attention sweep (bench/gpu_attn.py) and the SSD forward
# shapes (bench/gpu_ssd.py) for two builds of the library, in one run on one
# GPU, the two alternating round by round so that clock and temperature drift
# fall on both; each run of a script also times the peers (cuDNN / FA2,
# mamba_ssm), so every ratio has its peer of the same minute.  Then
# bench/compare_libs.py prints, per point, each build's median and the spread
# of its rounds (the noise), and after/before.
#   bench/compare_libs.sh BEFORE.so AFTER.so [ROUNDS] [extra gpu_attn.py args]
# Logs and CSVs go to $OUT (default ./out).  The mamba_ssm peer is imported
# from .peer/ (a copy of its python package) when present.
set -uo pipefail
A=$(readlink -f "$1"); B=$(readlink -f "$2"); R=${3:-3}; shift 3 || shift $#
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH=python:bench:.peer${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
for r in $(seq 1 "$R"); do
  # alternate which build goes first
  if [ $((r % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
  for tag in $order; do
    lib=$A; [ "$tag" = after ] && lib=$B
    # one tuning cache per build, kept across rounds (a shape is tuned once per machine)
    SF_AUTOTUNE_CACHE=$OUT/autotune_$tag.tsv SEQFUSE_LIB=$lib \
      python3 bench/gpu_attn.py --csv "$OUT/attn_${tag}_$r.csv" "$@" > "$OUT/attn_${tag}_$r.log" 2>&1 \
      || echo "attn $tag round $r failed: $(tail -3 "$OUT/attn_${tag}_$r.log")"
    SF_AUTOTUNE_CACHE=$OUT/autotune_$tag.tsv SEQFUSE_LIB=$lib \
      python3 bench/gpu_ssd.py --no-step --csv "$OUT/ssd_${tag}_$r.csv" > "$OUT/ssd_${tag}_$r.log" 2>&1 \
      || echo "ssd $tag round $r failed: $(tail -3 "$OUT/ssd_${tag}_$r.log")"
  done
done
python3 bench/compare_libs.py "$OUT" | tee "$OUT/compare.txt"
