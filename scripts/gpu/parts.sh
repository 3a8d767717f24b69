#!/usr/bin/env bash
# Cuts the payloads pack.sh made into parts: one tar of PAYLOAD's files, split into OUT/part-1, part-2, ... of at
# most SIZE each (split's sizes: 48M, 500K), each with PARTS, the sha256 of every part, so that setup.sh knows when
# it has them all and that each arrived whole. Replaces the parts OUT had.
#
#   bash scripts/gpu/parts.sh PAYLOAD OUT SIZE
set -euo pipefail
payload=${1:?usage: parts.sh PAYLOAD OUT SIZE} out=${2:?usage: parts.sh PAYLOAD OUT SIZE} size=${3:?usage: parts.sh PAYLOAD OUT SIZE}
work=$(mktemp -d "$out/.parts.XXXX")
trap 'rm -rf "$work"' EXIT
(cd "$payload" && tar -cf "$work/pack.tar" -- *)
split -b "$size" -d -a 2 "$work/pack.tar" "$work/pack.tar."
rm "$work/pack.tar"
(cd "$work" && sha256sum pack.tar.*) > "$work/PARTS"
rm -rf "$out"/part-*
index=0
for piece in "$work"/pack.tar.*; do
  index=$((index + 1))
  mkdir "$out/part-$index"
  mv "$piece" "$out/part-$index/"
  cp "$work/PARTS" "$out/part-$index/"
done
echo "$index part(s) in $out, each at most $size:"
du -sh "$out"/part-*
