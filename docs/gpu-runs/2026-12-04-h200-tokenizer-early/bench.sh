#!/usr/bin/env bash
# browser-bench --gpu (q4f16, 512x512, fast) of two builds, alternating: distold (tokenizer built after the text
# encoder's session) and distnew (tokenizer built while its weights upload). Output: $OUT/bench.md (all reports).
set -uo pipefail
source scripts/gpu/env.sh
CHR=$KLEIN_CHROMIUM
{ $CHR --version; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; } > $OUT/versions.txt 2>&1
for label in old1 new1 old2 new2; do
  dist=/tmp/dist${label%[0-9]}
  timeout ${LIMIT:-150} python3 -m builder browser-bench --gpu --browser $CHR --models $KLEIN_GPU_MODELS --dist $dist \
    --precision q4f16 --sizes 512x512 --memory fast --out /tmp/res/$label >> $OUT/bench.log 2>&1
  echo "$label exit $?" >> $OUT/versions.txt
  { echo "# $label ($dist)"; cat /tmp/res/$label/browser-bench.md; echo; } >> $OUT/bench.md 2>&1
  grep -E "warm reload:|create text_encoder|The text encoder|upload text_encoder|upload transformer|create transformer" /tmp/res/$label/browser-bench.md | head -8
done
