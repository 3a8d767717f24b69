#!/usr/bin/env bash
# On the H200, run in every call from the repository root: copies the parts carried in .h200/c1..c4 to /tmp/stage,
# and unpacks whatever has arrived (each step once): the Python packages (Playwright, Starlette, Uvicorn, ...;
# wheels unzipped into /tmp/site), esbuild and hash-wasm for scripts/hash_bench.py and scripts/read_bench.py (web_src/node_modules, with
# Playwright's node on PATH), the GL/Vulkan loader and font .debs, the full-size q4f16 repository (refilled from its
# structure), the app build, and Chromium 156 once its parts are all there.
set -euo pipefail
S=/tmp/stage
mkdir -p $S /tmp/chr /tmp/nodebin
for d in .h200/c1 .h200/c2 .h200/c3 .h200/c4; do
  [ -d $d ] && cp -rn $d/. $S/
done
if [ -f $S/site.tar.xz ] && [ ! -d /tmp/site ]; then
  tar -C /tmp -xJf $S/site.tar.xz
  ln -sf /tmp/site/playwright/driver/node /tmp/nodebin/node
  printf '#!/bin/sh\necho "npm is not on this machine" >&2; exit 1\n' > /tmp/nodebin/npm && chmod +x /tmp/nodebin/npm
  echo "python packages: $(ls /tmp/site | grep -c dist-info) in /tmp/site; node $(/tmp/nodebin/node --version)"
fi
if [ -f $S/nm.tar.xz ] && [ ! -x web_src/node_modules/.bin/esbuild ]; then
  tar -C web_src -xJf $S/nm.tar.xz
fi
if [ -d $S/debs ] && [ ! -f /tmp/debs.done ]; then
  for f in $S/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig && touch /tmp/debs.done
fi
if [ -f $S/structure.tar.xz ] && [ ! -d /tmp/full ]; then
  tar -C /tmp -xJf $S/structure.tar.xz
  /usr/bin/time -f "fill %e s" python3 scripts/weightless_repo.py fill /tmp/structure /tmp/full --seed 0 2>&1 | tail -2
  du -sh /tmp/full
fi
if [ -f $S/dist.tar.xz ] && [ ! -d /tmp/dist ]; then tar -C /tmp -xJf $S/dist.tar.xz; fi
if [ -f $S/chromium.xz.part.ab ] && [ -f $S/support.tar.xz.part.ab ] && [ ! -x /tmp/chr/chr/chromium/chromium ]; then
  cat $S/support.tar.xz.part.* | tar -C /tmp/chr -xJf -
  cat $S/chromium.xz.part.* | xz -d > /tmp/chr/chr/chromium/chromium
  chmod +x /tmp/chr/chr/chromium/chromium
  source docs/gpu-runs/2026-12-05-h200-stored-reads/env.sh
  $CHR --version
fi
df -h /tmp | tail -1
