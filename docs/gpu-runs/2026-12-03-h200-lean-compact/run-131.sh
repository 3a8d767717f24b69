#!/usr/bin/env bash
# On the H200: browser-bench in fast mode with the app built on onnxruntime-web 1.31.1 (the A/B against 1.30.0).
set -uo pipefail
source .h200/xe/env.sh
[ -d /tmp/dist-131 ] || tar -C /tmp -xJf .h200/xe/dist-131.tar.xz
timeout 400 python3 -m builder browser-bench --gpu --browser $CHR --models /tmp/full --dist /tmp/dist-131 \
   --precision q4f16 --sizes 512x512,1024x1024 --memory fast --out $OUT/fast-131 > $OUT/fast-131.log 2>&1
echo "fast-131 exit $?" | tee -a $OUT/versions.txt
tail -14 $OUT/fast-131/browser-bench.md 2>/dev/null || tail -20 $OUT/fast-131.log
