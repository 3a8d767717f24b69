#!/usr/bin/env bash
# On the H200: fill the full-size compact structure, then browser-bench (Chromium 150, q4f16) per MODES.
set -uo pipefail
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export VK_ICD_FILENAMES=$VK_DRIVER_FILES __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export LD_LIBRARY_PATH=/tmp/chr/chr/chromium:/tmp/chr/chr/lib PYTHONUNBUFFERED=1
CHR=/tmp/chr/chr/chromium/chromium
[ -d /tmp/dist ] || tar -C /tmp -xJf /tmp/stage/dist.tar.xz
if [ ! -d /tmp/full ]; then
  tar -C /tmp -xJf /tmp/stage/structure.tar.xz
  /usr/bin/time -f "fill %e s" python3 scripts/weightless_repo.py fill /tmp/structure /tmp/full --seed 0 2>&1 | tail -2
  du -sh /tmp/full
fi
{ $CHR --version; nvidia-smi -L; date -u; } > $OUT/versions.txt 2>&1
for mode in ${MODES:-fast lean}; do
  timeout ${LIMIT:-270} python3 -m builder browser-bench --gpu --browser $CHR --models /tmp/full --dist /tmp/dist \
     --precision q4f16 --sizes ${SIZES:-512x512,1024x1024} --memory $mode --out $OUT/$mode > $OUT/$mode.log 2>&1
  echo "$mode exit $?" | tee -a $OUT/versions.txt
  tail -14 $OUT/$mode/browser-bench.md 2>/dev/null || tail -20 $OUT/$mode.log
done
