#!/usr/bin/env bash
# On the GPU machine, from the repository root, once the three parts of ../2026-12-07-h100-kernel-lab/pack.sh (made
# from this branch, with this run.sh) are in /tmp/g: unpacks Chromium, the lab and the loaders (once), then runs the
# kernel lab at klein-4B's real shapes for every kernel the transformer step on our kernels uses.
# STAGE=1 (default): AdaLN, the q/k norm with RoPE and flash attention (about 4 minutes); STAGE=2: the linear layers
# (about 8 minutes: a call of its own). Results land in $OUT: kernel-lab-STAGE.json, lab.log, versions.txt.
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
  python3 -c 'import numpy, click; print("numpy", numpy.__version__, "click", click.__version__)'
  date -u
} >> "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
cd "$g/src"
lab() {  # NAME TIMEOUT --kernel K [--kernel K ...]
  local name=$1 timeout=$2; shift 2
  python3 -m builder kernel-lab --gpu --shapes real --site "$g/site" --browser "$chrome" \
    --out "$OUT/kernel-lab-$name.json" --timeout "$timeout" "$@" 2>&1 | tee -a "$OUT/lab.log"
  echo "$name exit ${PIPESTATUS[0]}" | tee -a "$OUT/versions.txt"
}
if [ "${STAGE:-1}" = 1 ]; then
  lab step-small-kernels 360 --kernel adaln --kernel qk_norm_rope --kernel flash_attention
else
  lab step-linear 540 --kernel linear
fi
