#!/usr/bin/env bash
# On the H200: join the Chromium parts, unpack its support files, the GL/Vulkan loader and fonts.
set -euo pipefail
cp .h200/xd/chromium.xz.part.ab /tmp/chr/
cat /tmp/chr/chromium.xz.part.* | xz -d > /tmp/chr/chromium.bin
tar -C /tmp/chr -xJf /tmp/stage/support.tar.xz
mv /tmp/chr/chromium.bin /tmp/chr/chr/chromium/chromium && chmod +x /tmp/chr/chr/chromium/chromium
for d in /tmp/stage/*.deb /tmp/stage/fonts/*.deb; do dpkg -x "$d" /; done
ldconfig
