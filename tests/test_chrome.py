"""Chromium's launch flags per mode and platform (builder.site.chrome.launch_args)."""

from __future__ import annotations

from builder.site.chrome import SKIP_WORKGROUP_INIT, launch_args


def test_software_mode_uses_swiftshader_and_no_vulkan() -> None:
    flags = launch_args(gpu=False, platform="linux")
    assert "--use-webgpu-adapter=swiftshader" in flags and "--enable-unsafe-webgpu" in flags
    assert not any("vulkan" in flag.lower() for flag in flags)


def test_only_software_mode_skips_the_zero_filling_of_workgroup_memory() -> None:
    assert SKIP_WORKGROUP_INIT in launch_args(gpu=False, platform="linux")
    for platform in ("linux", "win32", "darwin"):
        assert not any("disable_workgroup_init" in flag for flag in launch_args(gpu=True, platform=platform)), platform


def test_headless_linux_gpu_reaches_vulkan_with_the_f16_toggle() -> None:
    flags = launch_args(gpu=True, platform="linux")
    # Without these, headless Chromium on a Linux NVIDIA machine offers no WebGPU adapter at all.
    for needed in (
        "--use-gl=angle",
        "--use-angle=vulkan",
        "--ozone-platform=headless",
        "--disable-vulkan-surface",
        "--enable-features=Vulkan",
        "--enable-unsafe-webgpu",
    ):
        assert needed in flags, needed
    # ... and without this one, NVIDIA + Vulkan hides shader-f16 (the q4f16 fast path).
    assert "--enable-dawn-features=vulkan_enable_f16_on_nvidia" in flags
    assert not any("swiftshader" in flag for flag in flags)


def test_headed_linux_gpu_keeps_the_display_platform() -> None:
    flags = launch_args(gpu=True, headed=True, platform="linux")
    assert "--use-angle=vulkan" in flags
    assert "--ozone-platform=headless" not in flags and "--disable-vulkan-surface" not in flags


def test_gpu_elsewhere_needs_no_vulkan_flags() -> None:
    for platform in ("win32", "darwin"):
        flags = launch_args(gpu=True, platform=platform)
        assert "--enable-unsafe-webgpu" in flags
        assert not any("vulkan" in flag.lower() or "angle" in flag for flag in flags), platform


def test_the_f16_toggle_can_be_left_out_to_run_as_a_plain_linux_chrome() -> None:
    flags = launch_args(gpu=True, f16_toggle=False, platform="linux")
    assert "--use-angle=vulkan" in flags
    assert not any("vulkan_enable_f16_on_nvidia" in flag for flag in flags)
