#!/usr/bin/env bash
# On the GPU machine, from the root of the repository's clone there: gathers the parts scripts/gpu/pack.sh wrote,
# and once all have arrived (checked against their sha256) unpacks them into $KLEIN_GPU_ROOT (default
# /tmp/klein-gpu). Run it after each part arrives; each step runs once, and a second run only says what is there.
#
#   bash scripts/gpu/setup.sh [PARTS_DIR]     (default .gpu: the folder the parts were copied into, part-N/ each)
#
# Then: source scripts/gpu/env.sh, and scripts/gpu/run.sh runs a bench. Needs root for the loader and font
# packages (unpacked into /) and python3 >= 3.11 with numpy, onnx and onnxruntime (scripts/weightless_repo.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
parts_dir=${1:-.gpu}
root=${KLEIN_GPU_ROOT:-/tmp/klein-gpu}
stage=$root/stage
mkdir -p "$stage"
say() { echo "== $*"; }

# Gather: every part found is copied once into the stage (parts may arrive over several runs).
for list in "$parts_dir"/part-*/PARTS; do
  [ -e "$list" ] || continue
  if [ -f "$stage/PARTS" ] && ! cmp -s "$list" "$stage/PARTS"; then
    echo "$(dirname "$list") is of another pack than the one in $root: remove $root to start over with it." >&2
    exit 1
  fi
  cp "$list" "$stage/PARTS"
  for piece in "$(dirname "$list")"/pack.tar.*; do cp -n "$piece" "$stage/"; done
done
[ -f "$stage/PARTS" ] || { echo "No part in $parts_dir/part-*/ yet: copy the parts scripts/gpu/pack.sh wrote there." >&2; exit 1; }
missing=$(cd "$stage" && awk '{print $2}' PARTS | while read -r piece; do [ -f "$piece" ] || echo "$piece"; done)
if [ -n "$missing" ]; then
  say "$(wc -l < "$stage/PARTS") part(s) in all; still to come: $(echo "$missing" | tr '\n' ' ')"
  exit 0
fi

# Check, then join: a piece that arrived damaged is named and dropped (so a fresh copy of its part is taken), and
# nothing is unpacked until every piece is whole.
if [ ! -f "$root/unpacked/pack" ]; then
  damaged=$(cd "$stage" && while read -r sum piece; do
    echo "$sum  $piece" | sha256sum --quiet -c - > /dev/null 2>&1 || echo "$piece"
  done < PARTS)
  if [ -n "$damaged" ]; then
    (cd "$stage" && rm -f $damaged)
    echo "Arrived damaged: $(echo $damaged). Copy the part holding it into $parts_dir again, then run setup.sh." >&2
    exit 1
  fi
  mkdir -p "$root/payload" "$root/unpacked"
  (cd "$stage" && cat $(awk '{print $2}' PARTS)) | tar -C "$root/payload" -xf -
  touch "$root/unpacked/pack"
  say "all parts joined, commit $(cat "$root/payload/commit") (this clone: $(git describe --always --dirty 2>/dev/null))"
fi

# Unpack each payload once; a step is marked done only when it finished, so a failed one runs again next time.
todo() { [ -f "$root/payload/$1.tar.xz" ] && [ ! -f "$root/unpacked/$1" ]; }
unpack() { tar -C "${2:-$root}" -xJf "$root/payload/$1.tar.xz"; }
done_with() { touch "$root/unpacked/$1"; }
if todo python; then
  unpack python && done_with python
  say "Python packages in $root/site: $(cat "$root/site/KLEIN_PACKAGES")"
fi
if todo node; then
  unpack node web_src && done_with node
  say "esbuild and hash-wasm in web_src/node_modules"
fi
if todo debs; then
  unpack debs
  for deb in "$root"/debs/*.deb; do dpkg -x "$deb" /; done
  ldconfig && done_with debs
  say "the Vulkan/GL loader and fonts unpacked into /"
fi
if todo dist; then
  rm -rf "$root/dist" && unpack dist && done_with dist
  say "the app in $root/dist ($(grep -o '"onnxruntime_web": "[^"]*"' "$root/dist/.klein-build.json"))"
fi
if todo lab; then
  rm -rf "$root/lab" && unpack lab && done_with lab
  say "the kernel lab in $root/lab"
fi
if todo chromium; then
  rm -rf "$root/chr" && unpack chromium && done_with chromium
  say "Chromium: $(LD_LIBRARY_PATH=$root/chr/chromium:$root/chr/lib "$root/chr/chromium/chromium" --version 2>&1 | tail -1)"
fi
if todo model; then
  rm -rf "$root/model" && unpack model && done_with model
  say "the model in $root/model"
fi
if todo structure; then
  rm -rf "$root/structure" "$root/model" && unpack structure
  say "refilling the full-size model from its structure into $root/model"
  python3 scripts/weightless_repo.py fill "$root/structure" "$root/model" --seed 0 && done_with structure
  du -sh "$root/model"
fi

# What a run will use: python3 must import the command line with the packed packages.
# shellcheck source=scripts/gpu/env.sh
source scripts/gpu/env.sh
python3 -c "import builder.cli.app, builder.check.driver.session" \
  || { echo "python3 cannot import klein-web's command line with $root/site: the error above names the package to add to pack.sh." >&2; exit 1; }
say "ready: $(df -h "$root" | tail -1 | awk '{print $4}') free in $root; run scripts/gpu/run.sh"
