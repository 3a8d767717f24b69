#!/usr/bin/env bash
# On the H200: browser-bench of the build with streamed weights (/tmp/dist) and of the build before it
# (/tmp/distbase), GPU memory sampled every 100 ms around each. RUNS: "label:dist:mode ..." in order.
set -uo pipefail
source .h200/xh/env.sh
[ -d /tmp/dist ] || tar -C /tmp -xJf /tmp/stage/dist.tar.xz
if [ ! -d /tmp/distbase ] && [ -f .h200/xh/dist-base.tar.xz ]; then
  mkdir -p /tmp/db && tar -C /tmp/db -xJf .h200/xh/dist-base.tar.xz && mv /tmp/db/dist /tmp/distbase
fi
if [ ! -d /tmp/full ]; then
  tar -C /tmp -xJf /tmp/stage/structure.tar.xz
  /usr/bin/time -f "fill %e s" python3 scripts/weightless_repo.py fill /tmp/structure /tmp/full --seed 0 2>&1 | tail -2
fi
{ $CHR --version; nvidia-smi -L; date -u; } > $OUT/versions.txt 2>&1
for run in ${RUNS}; do
  IFS=: read -r label dist mode <<< "$run"
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -lms 100 > $OUT/smi-$label.csv 2>&1 &
  smi=$!
  timeout ${LIMIT:-270} python3 -m builder browser-bench --gpu --browser $CHR --models /tmp/full --dist $dist \
     --precision q4f16 --sizes ${SIZES:-512x512,1024x1024} --memory $mode --out $OUT/$label > $OUT/$label.log 2>&1
  echo "$label exit $?" | tee -a $OUT/versions.txt
  kill $smi
  tail -14 $OUT/$label/browser-bench.md 2>/dev/null || tail -20 $OUT/$label.log
done
