#!/usr/bin/env bash
# On an x86-64 Debian build machine with Debian's chromium (156) installed and the repository's development
# environment: writes the three parts run.sh needs on the GPU machine, each at most 50 MB so that it travels in one
# call beside the working tree (64 MiB in all):
#   p1  lab.tar.xz (the repository's builder/ package and the lab built by `klein-web kernel-lab --build`), the
#       GL/Vulkan loader and font .debs, run.sh, and the first part of Chromium
#   p2, p3  the rest of Chromium (pack-chromium-for-device.sh's files, split again)
#
#   bash pack.sh OUT [CHROMIUM_PACK]    (CHROMIUM_PACK: pack-chromium-for-device.sh's output, made if missing)
set -euo pipefail
out=$(realpath -m "${1:?usage: pack.sh OUT [CHROMIUM_PACK]}")
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
chr=${2:-$work/chr}
mkdir -p "$out"/p1/debs "$out"/p2 "$out"/p3 "$work/lab/src"
cd "$repo"

$py -m builder kernel-lab --build "$work/lab/site"
cp -a builder "$work/lab/src/"
find "$work/lab/src" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$work/lab" -cf - src site | xz -9 -T0 > "$out/p1/lab.tar.xz"
cp "$here/run.sh" "$out/p1/"

o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists='"$work"'/apt'
mkdir -p "$work/apt/partial"
apt-get $o update > /dev/null
(cd "$out/p1/debs" && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 \
   fontconfig-config fonts-dejavu-core)

[ -d "$chr/part2" ] || bash "${PACK_CHROMIUM:-$repo/../shared/tools/pack-chromium-for-device.sh}" "$chr"
cat "$chr"/part1/chromium.xz.part.* "$chr"/part2/chromium.xz.part.* > "$work/chromium.xz"
cat "$work/chromium.xz" "$chr/part2/support.tar.xz" > "$work/all"
echo "$(stat -c %s "$work/chromium.xz")" > "$out/p1/chromium.size"
room=$(( 50000000 - $(du -cb "$out"/p1 | tail -1 | cut -f1) ))
head -c "$room" "$work/all" > "$out/p1/all.part.0"
tail -c +"$((room + 1))" "$work/all" | split -b 48000000 -d -a 1 - "$work/rest."
mv "$work/rest.0" "$out/p2/all.part.1"
mv "$work/rest.1" "$out/p3/all.part.2"
du -b "$out"/p1 "$out"/p2 "$out"/p3
