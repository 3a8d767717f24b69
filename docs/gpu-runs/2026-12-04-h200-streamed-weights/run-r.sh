#!/usr/bin/env bash
# On the H200: regress --gpu of the compact q4 set at 512² (streamed weights) against the CPU reference of the same
# filled repository, then run-w.sh's benches.
set -uo pipefail
source .h200/xh/env.sh
[ -d /tmp/dist ] || tar -C /tmp -xJf /tmp/stage/dist.tar.xz
if [ ! -d /tmp/full ]; then
  tar -C /tmp -xJf /tmp/stage/structure.tar.xz
  python3 scripts/weightless_repo.py fill /tmp/structure /tmp/full --seed 0 2>&1 | tail -1
fi
timeout 200 python3 -m builder regress --gpu --browser $CHR --models /tmp/full --dist /tmp/dist \
   --reference .h200/xh/ref-512.png --prompt "a red fox in the snow" --seed 42 --size 512x512 \
   --precision q4 --psnr-min 40 --report /tmp/regress-512 > $OUT/regress.log 2>&1
echo "regress exit $?"
cp "$(find /tmp/regress-512 -name report.json | head -1)" $OUT/regress-report.json
tail -4 $OUT/regress.log
bash .h200/xh/run-w.sh
