#!/usr/bin/env bash
# On the GPU machine, from the repository root, after the three parts of pack.sh were copied into /tmp/g (one call
# each: `mkdir -p /tmp/g && cp -r .gpu/pN/* /tmp/g/`): unpacks Chromium, the lab and the loaders (once), then runs the
# kernel lab at small shapes (a correctness pass of every variant the GPU offers) and at klein-4B's real shapes.
# Results land in $OUT: kernel-lab-small.json, kernel-lab-attention.json, kernel-lab-linear.json, lab.log,
# versions.txt.
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
} > "$OUT/versions.txt" 2>&1
cat "$OUT/versions.txt"
cd "$g/src"
lab() {  # NAME SHAPES TIMEOUT [--kernel K]
  local name=$1 shapes=$2 timeout=$3; shift 3
  python3 -m builder kernel-lab --gpu --shapes "$shapes" --site "$g/site" --browser "$chrome" \
    --out "$OUT/kernel-lab-$name.json" --timeout "$timeout" "$@" 2>&1 | tee -a "$OUT/lab.log"
  echo "$name exit ${PIPESTATUS[0]}" | tee -a "$OUT/versions.txt"
}
# STAGE 1 (default): small shapes and attention at real shapes; STAGE 2: the linear layers at real shapes (a call of
# their own: about 8 minutes).
if [ "${STAGE:-1}" = 1 ]; then
  lab small small 150
  lab attention real 150 --kernel flash_attention
else
  lab linear real 540 --kernel linear
fi
