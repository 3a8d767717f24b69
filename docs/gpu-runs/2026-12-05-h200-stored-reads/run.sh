#!/usr/bin/env bash
# On the H200, after setup.sh has unpacked everything (from the repository root):
#   BENCH="label:sizes ..."  browser-bench --gpu --precision q4f16 --memory fast of the build in /tmp/dist, one
#                            after the other, GPU memory sampled every 100 ms (smi-LABEL.csv); results in $OUT/LABEL/
#   READ=1                   python scripts/read_bench.py --gpu (read_bench.txt): the store's reads back, both ways
#   HASH=1                   python scripts/hash_bench.py --store (hash_bench.txt): how fast the store fills
set -uo pipefail
source docs/gpu-runs/2026-12-05-h200-stored-reads/env.sh
export PYTHONPATH=$PYTHONPATH:$PWD
V=$OUT/versions${TAG:-}.txt
{ $CHR --version; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; date -u
  echo "dist: $(grep -o '"onnxruntime_web": "[^"]*"' /tmp/dist/.klein-build.json)"
} > $V 2>&1
if [ "${READ:-0}" = 1 ]; then
  timeout ${READ_LIMIT:-200} python3 scripts/read_bench.py --gpu > $OUT/read_bench.txt 2>&1
  echo "read_bench exit $?" | tee -a $V
  tail -12 $OUT/read_bench.txt
fi
if [ "${HASH:-0}" = 1 ]; then
  timeout ${HASH_LIMIT:-200} python3 scripts/hash_bench.py --store >> $OUT/hash_bench.txt 2>&1
  echo "hash_bench exit $?" | tee -a $V
  tail -12 $OUT/hash_bench.txt
fi
for run in ${BENCH:-}; do
  IFS=: read -r label sizes <<< "$run"
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -lms 100 > $OUT/smi-$label.csv 2>&1 &
  smi=$!
  /usr/bin/time -f "$label wall %e s" timeout ${LIMIT:-270} python3 -m builder browser-bench --gpu --browser $CHR \
     --models /tmp/full --dist /tmp/dist --precision q4f16 --sizes $sizes --memory fast --out /tmp/res/$label \
     >> $OUT/bench${TAG:-}.log 2>&1
  echo "$label exit $?" | tee -a $V
  kill $smi
  mkdir -p $OUT/$label && cp /tmp/res/$label/browser-bench.md /tmp/res/$label/browser-bench.json $OUT/$label/ 2>/dev/null
  awk -F', ' '{sub(/ MiB/,"",$2); if ($2+0>m) m=$2+0} END {print "'$label' nvidia-smi peak " m " MiB"}' $OUT/smi-$label.csv | tee -a $V
  head -14 /tmp/res/$label/browser-bench.md 2>/dev/null || tail -20 $OUT/bench${TAG:-}.log
done
