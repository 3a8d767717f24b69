# Sourced on the H200: the NVIDIA Vulkan/EGL loader paths and the unpacked Chromium 150.
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export VK_ICD_FILENAMES=$VK_DRIVER_FILES __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export LD_LIBRARY_PATH=/tmp/chr/chr/chromium:/tmp/chr/chr/lib PYTHONUNBUFFERED=1
CHR=/tmp/chr/chr/chromium/chromium
