# Sourced on the GPU machine after scripts/gpu/setup.sh (from the repository root): the NVIDIA Vulkan and EGL
# loaders' driver files, the unpacked Chromium, the packed Python packages behind the machine's own with this clone
# on the path, and a node for the scripts that bundle pages (Playwright's). Sets KLEIN_CHROMIUM, KLEIN_GPU_DIST and
# KLEIN_GPU_MODELS, KLEIN_GPU_LAB.
root=${KLEIN_GPU_ROOT:-/tmp/klein-gpu}
# The driver's Vulkan ICD and EGL vendor files: where the NVIDIA container toolkit puts them, else where Debian does.
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
  /etc/vulkan/icd.d/nvidia_icd.json; do
  if [ -f "$icd" ]; then export VK_DRIVER_FILES=$icd VK_ICD_FILENAMES=$icd; break; fi
done
for egl in /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json /usr/share/glvnd/egl_vendor.d/10_nvidia.json; do
  if [ -f "$egl" ]; then export __EGL_VENDOR_LIBRARY_FILENAMES=$egl; break; fi
done
export LD_LIBRARY_PATH=$root/chr/chromium:$root/chr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The packed Python packages after the machine's own (site.addsitedir appends), so they only fill what it lacks.
mkdir -p "$root/boot"
printf 'import site\nsite.addsitedir(%s)\n' "'$root/site'" > "$root/boot/sitecustomize.py"
export PYTHONPATH=$root/boot:$PWD PYTHONUNBUFFERED=1
# Playwright's node runs esbuild for the page-bundling scripts; an npm beside it only says why there is none
# (node_modules arrives packed, so nothing installs).
mkdir -p "$root/bin"
if [ -x "$root/site/playwright/driver/node" ]; then
  ln -sf "$root/site/playwright/driver/node" "$root/bin/node"
  printf '#!/bin/sh\necho "no npm on the GPU machine: scripts/gpu/pack.sh packs what web_src/node_modules needs" >&2\nexit 1\n' \
    > "$root/bin/npm" && chmod +x "$root/bin/npm"
fi
export PATH=$root/bin:$PATH
export KLEIN_CHROMIUM=$root/chr/chromium/chromium KLEIN_GPU_DIST=$root/dist KLEIN_GPU_MODELS=$root/model
export KLEIN_GPU_LAB=$root/lab
