#!/usr/bin/env bash
# On the H200: regress --gpu of the compact set at 512² against the CPU reference of the same graphs (q4 text encoder
# and transformer, fp16 VAE decoder; made off the machine from the same filled repository), then browser-bench in
# fast mode with onnxruntime-web 1.30.0.
set -uo pipefail
source .h200/xe/env.sh
[ -d /tmp/dist ] || tar -C /tmp -xJf /tmp/stage/dist.tar.xz
if [ ! -d /tmp/full ]; then
  tar -C /tmp -xJf /tmp/stage/structure.tar.xz
  python3 scripts/weightless_repo.py fill /tmp/structure /tmp/full --seed 0 2>&1 | tail -1
fi
{ $CHR --version; nvidia-smi -L; date -u; } > $OUT/versions.txt 2>&1
timeout 200 python3 -m builder regress --gpu --browser $CHR --models /tmp/full --dist /tmp/dist \
   --reference .h200/xe/ref-512.png --prompt "a red fox in the snow" --seed 42 --size 512x512 \
   --precision q4 --psnr-min 40 --report /tmp/regress-512 > $OUT/regress.log 2>&1
echo "regress exit $?" | tee -a $OUT/versions.txt
cp "$(find /tmp/regress-512 -name report.json | head -1)" $OUT/regress-report.json
cp "$(find /tmp/regress-512 -name 'candidate*.png' | head -1)" $OUT/regress-candidate.png
tail -4 $OUT/regress.log
MODES=fast SIZES=512x512,1024x1024 LIMIT=300 bash /tmp/stage/run.sh
