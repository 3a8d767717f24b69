"""The Chrome switches the app needs for WebGPU, per platform: the hint `serve` prints and what regress launches."""

from __future__ import annotations

import os
import sys

# SwiftShader runs the zero-filling of workgroup memory that Dawn adds to every compute shader slowly (about half
# of a tiny-model image's CPU time: docs/development-testing.md); onnxruntime's kernels write that memory before
# they read it, so leaving it out changes no result.
SKIP_WORKGROUP_INIT = "--enable-dawn-features=disable_workgroup_init"
# Flags for a headless run on a machine without a GPU: WebGPU on SwiftShader (software, no shader-f16).
SOFTWARE_FLAGS = (
    "--enable-unsafe-webgpu",
    "--enable-unsafe-swiftshader",
    "--use-webgpu-adapter=swiftshader",
    "--use-angle=swiftshader",
    SKIP_WORKGROUP_INIT,
)
# Flags for a real GPU on any system: WebGPU on (it is still behind a flag on Linux), blocklist ignored
# (Chrome blocklists many Linux drivers).
GPU_FLAGS = (
    "--enable-unsafe-webgpu",
    "--ignore-gpu-blocklist",
)
# Linux reaches the GPU through Vulkan only, with ANGLE on Vulkan for Chrome's own GL. On NVIDIA + Vulkan,
# Dawn hides `shader-f16` (and with it the app's q4f16 fast path) unless its vulkan_enable_f16_on_nvidia
# toggle is on; the toggle changes nothing on other vendors.
NVIDIA_F16_TOGGLE = "--enable-dawn-features=vulkan_enable_f16_on_nvidia"
LINUX_GPU_FLAGS = (
    "--enable-features=Vulkan",
    "--use-gl=angle",
    "--use-angle=vulkan",
    NVIDIA_F16_TOGGLE,
)
# Headless on Linux (no display server): without the headless Ozone platform Chrome's GL falls back to
# SwiftShader and requestAdapter() returns null; Vulkan presentation surfaces crash the GPU process there.
LINUX_HEADLESS_GPU_FLAGS = (
    "--ozone-platform=headless",
    "--disable-vulkan-surface",
)
# What a person on Linux adds to their own Chrome (`klein-web serve` prints it): the GPU flags a desktop session needs.
LINUX_DESKTOP_CHROME_FLAGS = " ".join(("--enable-unsafe-webgpu", "--enable-features=Vulkan", NVIDIA_F16_TOGGLE))
# Test and CI machines often have no outside network: background requests only produce noise and refusals.
QUIET_FLAGS = (
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-default-browser-check",
)


def launch_args(*, gpu: bool, headed: bool = False, f16_toggle: bool = True, platform: str = sys.platform) -> list[str]:
    """Chromium's flags for WebGPU on SwiftShader (`gpu=False`) or on the machine's GPU.

    `f16_toggle=False` leaves out the NVIDIA shader-f16 toggle: the browser a Linux user starts without it."""
    if not gpu:
        flags = list(SOFTWARE_FLAGS)
    else:
        flags = list(GPU_FLAGS)
        if platform.startswith("linux"):
            flags += [f for f in LINUX_GPU_FLAGS if f16_toggle or f != NVIDIA_F16_TOGGLE]
            if not headed:
                flags += LINUX_HEADLESS_GPU_FLAGS
    flags += QUIET_FLAGS
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Chromium refuses to run as root with its sandbox on; its GPU process has a sandbox of its own.
        flags += ["--no-sandbox", "--disable-gpu-sandbox"]
    return flags
