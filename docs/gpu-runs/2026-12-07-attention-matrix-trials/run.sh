#!/usr/bin/env bash
# On the GPU machine, from the repository root, after the three parts were copied into /tmp/g (one call each:
# `mkdir -p /tmp/g && cp -r .gpu/attn/pN/* /tmp/g/`; the last part then runs this): unpacks Chromium, the lab and the
# loaders (once, as ../2026-12-07-h100-kernel-lab/run.sh does), then runs the kernel lab's flash attention at
# klein-4B's real shapes and at the small ones. Results in $OUT: kernel-lab-attention.json, kernel-lab-small.json,
# lab.log, versions.txt.
set -uo pipefail
g=/tmp/g
cd "$g"
if [ ! -x chr/chromium/chromium ]; then
for f in debs/*.deb; do dpkg -x "$f" /; done
ldconfig
cat all.part.* > all && rm -f all.part.*
size=$(cat chromium.size)
head -c "$size" all | xz -d > chromium.bin
tail -c +"$((size + 1))" all | tar -C "$g" -xJf -
mv chromium.bin chr/chromium/chromium && chmod +x chr/chromium/chromium
tar -xJf lab.tar.xz
fi
export LD_LIBRARY_PATH=$g/chr/chromium:$g/chr/lib
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export VK_ICD_FILENAMES=$VK_DRIVER_FILES
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export PYTHONPATH=$g/src PYTHONUNBUFFERED=1
chrome=$g/chr/chromium/chromium
{
  "$chrome" --version
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 --version
  date -u
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
cd "$g/src"
lab() {  # NAME SHAPES TIMEOUT
  python3 -m builder kernel-lab --gpu --shapes "$2" --site "$g/site" --browser "$chrome" --kernel flash_attention \
    --out "$OUT/kernel-lab-$1.json" --timeout "$3" 2>&1 | tee -a "$OUT/lab.log"
  echo "$1 exit ${PIPESTATUS[0]}" | tee -a "$OUT/versions.txt"
}
# REAL_S / SMALL_S: each run's time limit in seconds (0 skips it), to fit what device time is left.
[ "${REAL_S:-170}" != 0 ] && lab attention real "${REAL_S:-170}"
[ "${SMALL_S:-60}" != 0 ] && lab small small "${SMALL_S:-60}"
