# Sourced on the H200 (after setup.sh): the NVIDIA Vulkan/EGL loader paths, the unpacked Chromium 156, the carried
# Python packages, and a `node` on PATH (Playwright's) for scripts/hash_bench.py's esbuild bundles.
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export VK_ICD_FILENAMES=$VK_DRIVER_FILES __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export LD_LIBRARY_PATH=/tmp/chr/chr/chromium:/tmp/chr/chr/lib PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site PATH=/tmp/nodebin:$PATH
CHR=/tmp/chr/chr/chromium/chromium
export KLEIN_CHROMIUM=$CHR
