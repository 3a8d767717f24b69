#!/usr/bin/env bash
# On the H200, after setup.sh has unpacked everything:
#   BENCH="label:dist:sizes ..."  browser-bench --gpu --precision q4f16 --memory fast of each build, one after the
#                                 other, GPU memory sampled every 100 ms (smi-LABEL.csv); results in $OUT/LABEL/
#   HASH=1                        python scripts/hash_bench.py --store (hash_bench.txt)
#   REGRESS=1                     regress --gpu --precision q4 --size 512x512 against --reference-from-cpu
#                                 (onnxruntime CPU on the same repository), with the 1.30.0 build
set -uo pipefail
source docs/gpu-runs/2026-12-04-h200-chromium156/env.sh
V=$OUT/versions${TAG:-}.txt
{ $CHR --version; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; date -u
  for v in 130 131; do echo "dist$v: $(grep -o '"onnxruntime_web": "[^"]*"' /tmp/dist$v/.klein-build.json)"; done
} > $V 2>&1
if [ "${HASH:-0}" = 1 ]; then
  for i in $(seq ${HASH_RUNS:-1}); do
    PYTHONPATH=$PYTHONPATH:$PWD timeout ${HASH_LIMIT:-200} python3 scripts/hash_bench.py --store >> $OUT/hash_bench.txt 2>&1
    echo "hash_bench exit $?" | tee -a $V
  done
  cat $OUT/hash_bench.txt
fi
for run in ${BENCH:-}; do
  IFS=: read -r label dist sizes <<< "$run"
  nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -lms 100 > $OUT/smi-$label.csv 2>&1 &
  smi=$!
  /usr/bin/time -f "$label wall %e s" timeout ${LIMIT:-270} python3 -m builder browser-bench --gpu --browser $CHR \
     --models /tmp/full --dist $dist --precision q4f16 --sizes $sizes --memory fast --out /tmp/res/$label \
     >> $OUT/bench${TAG:-}.log 2>&1
  echo "$label exit $?" | tee -a $V
  kill $smi
  mkdir -p $OUT/$label && cp /tmp/res/$label/browser-bench.md /tmp/res/$label/browser-bench.json $OUT/$label/ 2>/dev/null
  awk -F', ' '{sub(/ MiB/,"",$2); if ($2+0>m) m=$2+0} END {print "'$label' nvidia-smi peak " m " MiB"}' $OUT/smi-$label.csv | tee -a $V
  head -12 /tmp/res/$label/browser-bench.md 2>/dev/null || tail -20 $OUT/bench${TAG:-}.log
done
if [ "${REGRESS:-0}" = 1 ]; then
  timeout ${REGRESS_LIMIT:-300} python3 -m builder regress --gpu --browser $CHR --models /tmp/full --dist /tmp/dist130 \
     --reference-from-cpu --prompt "a red fox in the snow" --seed 42 --size 512x512 --precision q4 --psnr-min 40 \
     --report /tmp/regress-512 > $OUT/regress.log 2>&1
  echo "regress exit $?" | tee -a $V
  cp "$(find /tmp/regress-512 -name report.json | head -1)" $OUT/regress-report.json 2>/dev/null
  tail -6 $OUT/regress.log
fi
