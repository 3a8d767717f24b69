#!/usr/bin/env bash
# On the H200: the app in Debian's Chromium 150, whose subgroup-matrix shaders fail, twice in one profile.
set -uo pipefail
python3 -m pip install -q --no-deps .h200/c4/pillow-*.whl 2>&1 | tail -2
tar -C /tmp -xJf .h200/c4/mid.tar.xz && tar -C /tmp -xJf .h200/c4/dist.tar.xz
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export VK_ICD_FILENAMES=$VK_DRIVER_FILES __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export LD_LIBRARY_PATH=/tmp/chr/chr/chromium:/tmp/chr/chr/lib PYTHONUNBUFFERED=1
CHR=/tmp/chr/chr/chromium/chromium
{ $CHR --version; nvidia-smi -L; } > $OUT/versions.txt 2>&1
common=(--gpu --browser $CHR --models /tmp/mid --dist /tmp/dist --reference .h200/c4/ref-512.png
        --prompt "a red fox in the snow" --seed 42 --size 512x512 --psnr-min 30 --profile /tmp/prof150)
for run in first again; do
  timeout 250 python3 -m builder regress "${common[@]}" --report /tmp/r-$run > $OUT/$run.log 2>&1
  echo "$run exit $?" | tee -a $OUT/versions.txt
  cp "$(find /tmp/r-$run -name report.json | head -1)" $OUT/$run-report.json 2>/dev/null
  cp "$(find /tmp/r-$run -name 'candidate*.png' | head -1)" $OUT/$run-candidate.png 2>/dev/null
done
tail -5 $OUT/first.log $OUT/again.log
