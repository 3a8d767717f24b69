#!/usr/bin/env bash
# Packs everything a run on a GPU machine needs into parts small enough to copy there one at a time. Runs on an
# x86-64 Debian machine from a clone of this repository (nothing outside it is read but Debian's Chromium and apt):
#
#   bash scripts/gpu/pack.sh OUT [--model full-size|tiny|none|DIR] [--onnxruntime-web VERSION] [--part-mb N]
#                                [--python-version X.Y]
#
# OUT gets part-1/, part-2/, ... (each at most --part-mb MiB, default 48) and keeps in OUT/work what is slow to make
# (the full-size model's structure), so a second pack reuses it. Copy the parts to the GPU machine, into one folder
# of the repository's clone there (`.gpu/` is git-ignored), in any order; scripts/gpu/setup.sh unpacks them once
# they are all there, and scripts/gpu/run.sh runs the benches (docs/development.md#gpu-runs).
#
# What the parts hold:
#   chromium  Debian's Chromium as installed here (apt-get install chromium): the browser, its support files and
#             ANGLE, and every library it links except the C runtime (the GPU machine's own glibc is newer)
#   debs      the Vulkan/GL loader and the fonts Chromium needs (apt-get download)
#   python    Playwright, Starlette, Uvicorn and watchfiles with what they require, at the versions installed here,
#             as wheels for --python-version (default 3.12), unzipped; the GPU machine uses those it lacks
#   node      esbuild and hash-wasm from web_src/node_modules (scripts/hash_bench.py and read_bench.py bundle pages)
#   dist      the app, built here (`klein-web build`, with --onnxruntime-web when given)
#   lab       the kernel lab, built here (`klein-web kernel-lab --build`: its page, runtime and graphs), where the
#             commit has one
#   model     full-size (the default): the structure of a full-size klein-4B repository with random weights, q4 and
#             q4f16 (`make-tiny --full-size`, `convert --precision q4f16`, `scripts/weightless_repo.py strip`:
#             about 25 minutes and 30 GB of disk on a 2-core machine, once), which setup.sh refills; tiny:
#             make-tiny's model; DIR: that model folder as it is; none: no model
#
# Python: the first of $VIRTUAL_ENV, .venv-test (made by scripts/test.sh) and python3 that has klein-web's packages
# (and, for --model full-size or tiny, the `convert` extra); else it says what is missing and how to install it.
set -euo pipefail

usage="usage: bash scripts/gpu/pack.sh OUT [--model full-size|tiny|none|DIR] [--onnxruntime-web VERSION] [--part-mb N] [--python-version X.Y]"
[ $# -ge 1 ] || { echo "$usage" >&2; exit 2; }
out=$(realpath -m "$1"); shift
model=full-size ort="" part_mb=48 target_python=3.12
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=${2:?$usage}; shift 2 ;;
    --onnxruntime-web) ort=${2:?$usage}; shift 2 ;;
    --part-mb) part_mb=${2:?$usage}; shift 2 ;;
    --python-version) target_python=${2:?$usage}; shift 2 ;;
    *) echo "unknown option $1; $usage" >&2; exit 2 ;;
  esac
done
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
say() { echo "== $*" >&2; }

# --------------------------------------------------------------------------------------- a Python with the packages
needed="jinja2 PIL numpy click playwright starlette uvicorn watchfiles"
case "$model" in full-size|tiny) needed="$needed torch diffusers transformers onnx onnxscript safetensors" ;; esac
missing_in() { "$1" -c "
import importlib.util, sys
sys.stdout.write(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))" $needed 2>/dev/null || echo "(no python)"; }
py="" report=""
for candidate in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" "$repo/.venv-test/bin/python" "$(command -v python3 || true)"; do
  [ -n "$candidate" ] && [ -x "$candidate" ] || continue
  lacks=$(missing_in "$candidate")
  if [ -z "$lacks" ]; then py=$candidate; break; fi
  report="$report  $candidate lacks: $lacks\n"
done
if [ -z "$py" ]; then
  printf "pack.sh needs a python3 with klein-web's packages%s; none was found:\n%b" \
    "$(case "$model" in full-size|tiny) echo " and the convert extra" ;; esac)" "$report" >&2
  echo "Make one with: bash scripts/test.sh --collect-only -q   (a .venv-test with everything, which pack.sh finds)" >&2
  exit 1
fi
say "python: $py"
command -v xz >/dev/null && command -v apt-get >/dev/null || { echo "pack.sh needs xz and apt-get (Debian)." >&2; exit 1; }
[ -x /usr/lib/chromium/chromium ] || { echo "No Debian Chromium here: apt-get install -y chromium, then pack again." >&2; exit 1; }

mkdir -p "$out/work"
payload=$(mktemp -d "$out/work/payload.XXXX")
tmp=$(mktemp -d "$out/work/tmp.XXXX")
trap 'rm -rf "$payload" "$tmp"' EXIT

# ------------------------------------------------------------------------------------------------------- chromium
say "Chromium $(/usr/lib/chromium/chromium --version 2>/dev/null | awk '{print $2}')"
src=/usr/lib/chromium
mkdir -p "$tmp/chr/chromium" "$tmp/chr/lib"
cp -a "$src"/{chromium,chrome_crashpad_handler,icudtl.dat,resources.pak,chrome_100_percent.pak,chrome_200_percent.pak} \
  "$src"/{snapshot_blob.bin,v8_context_snapshot.bin,locales} "$tmp/chr/chromium/"
# ANGLE and the Vulkan loader Chromium ships: without libEGL/libGLESv2 its GPU process exits and WebGPU has no adapter.
for f in libEGL.so libGLESv2.so libvulkan.so.1 libvk_swiftshader.so vk_swiftshader_icd.json; do
  [ -e "$src/$f" ] && cp -a "$src/$f" "$tmp/chr/chromium/"
done
ldd "$src/chromium" | awk '$3 ~ /^\// {print $3}' \
  | grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so|ld-linux' \
  | while read -r lib; do cp -L "$lib" "$tmp/chr/lib/"; done
tar -C "$tmp" -cf - chr | xz -T0 -6 > "$payload/chromium.tar.xz"
rm -rf "$tmp/chr"

# ----------------------------------------------------------------------------------------------------------- debs
say "the Vulkan/GL loader and fonts"
mkdir -p "$tmp/apt/partial" "$tmp/debs"
apt_options=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$tmp/apt" -oAPT::Sandbox::User=root)
apt-get "${apt_options[@]}" update > /dev/null
(cd "$tmp/debs" && apt-get "${apt_options[@]}" download -q libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 \
  libgles2 fontconfig-config fonts-dejavu-core > /dev/null)
tar -C "$tmp" -cf - debs | xz -T0 > "$payload/debs.tar.xz"

# --------------------------------------------------------------------------------------------------------- python
say "Python packages for python$target_python"
# The serving and driving packages with everything they require, at the versions installed here; on the GPU machine
# its own installed packages come first and these only fill what it lacks (scripts/gpu/env.sh).
packages=$("$py" - <<'CLOSURE'
from importlib.metadata import distribution
from pip._vendor.packaging.requirements import Requirement

wanted, seen = ["playwright", "starlette", "uvicorn", "watchfiles"], {}
while wanted:
    dist = distribution(wanted.pop())
    name = dist.metadata["Name"].lower().replace("_", "-")
    if name in seen:
        continue
    seen[name] = dist.version
    for line in dist.requires or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": "", "python_version": "3.12"}):
            wanted.append(requirement.name)
print(" ".join(f"{name}=={version}" for name, version in sorted(seen.items())))
CLOSURE
)
mkdir -p "$tmp/whl" "$tmp/site"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$target_python" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$tmp/whl" $packages
# Unzipped keeping each file's mode: Playwright's driver (its node) must stay executable.
"$py" - "$tmp/site" "$tmp"/whl/*.whl <<'UNZIP'
import os, sys, zipfile
for wheel in sys.argv[2:]:
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = archive.extract(info, sys.argv[1])
            if (info.external_attr >> 16) & 0o111:
                os.chmod(path, (info.external_attr >> 16) & 0o777)
UNZIP
echo "$packages" > "$tmp/site/KLEIN_PACKAGES"
tar -C "$tmp" -cf - site | xz -T0 -6 > "$payload/python.tar.xz"

# ------------------------------------------------------------------------------------------------------ app, node
say "the app"
"$py" -m builder build --out "$tmp/dist" ${ort:+--onnxruntime-web "$ort"}
tar -C "$tmp" -cf - dist | xz -T0 -6 > "$payload/dist.tar.xz"
# A commit before the kernel lab (an older build packed for comparison, with scripts/gpu/ checked out into it) has none.
if "$py" -m builder kernel-lab --help > /dev/null 2>&1; then
  say "the kernel lab"
  "$py" -m builder kernel-lab --build "$tmp/lab"
  tar -C "$tmp" -cf - lab | xz -T0 -6 > "$payload/lab.tar.xz"
fi
tar -C web_src -cf - node_modules/esbuild node_modules/@esbuild node_modules/.bin/esbuild node_modules/hash-wasm \
  node_modules/.klein-lock-hash | xz -T0 -6 > "$payload/node.tar.xz"

# ---------------------------------------------------------------------------------------------------------- model
case "$model" in
  none) ;;
  full-size)
    structure=$out/work/structure
    if [ ! -f "$structure/weights.json" ]; then
      free_gb=$(df -BG --output=avail "$out/work" | tail -1 | tr -dc 0-9)
      [ "$free_gb" -ge 32 ] || { echo "The full-size model needs about 32 GB free in $out/work; $free_gb GB are." >&2; exit 1; }
      say "the full-size model: make-tiny --full-size (about 7 minutes on 2 cores)"
      rm -rf "$out/work/full-src" "$out/work/full-repo" "$structure"
      "$py" -m builder make-tiny --full-size "$out/work/full-src"
      say "convert --precision q4f16 (about 17 minutes on 2 cores)"
      "$py" -m builder convert --precision q4f16 --jobs 1 "$out/work/full-src/diffusers" "$out/work/full-repo"
      "$py" scripts/weightless_repo.py strip "$out/work/full-repo" "$structure.partial"
      mv "$structure.partial" "$structure"
      rm -rf "$out/work/full-src" "$out/work/full-repo"
    fi
    say "the full-size model's structure ($structure, made $(date -r "$structure/weights.json" +%F))"
    tar -C "$out/work" -cf - structure | xz -T0 -6 > "$payload/structure.tar.xz" ;;
  tiny)
    say "make-tiny's model"
    "$py" -m builder make-tiny "$tmp/tiny"
    tar -C "$tmp/tiny" -cf - --transform 's,^q4,model,' q4 | xz -T0 -6 > "$payload/model.tar.xz" ;;
  *)
    [ -f "$model/manifest.json" ] || { echo "--model $model: no manifest.json there (a model folder, full-size, tiny or none)." >&2; exit 1; }
    say "the model folder $model"
    tar -C "$(dirname "$(realpath "$model")")" -cf - --transform "s,^$(basename "$(realpath "$model")"),model," \
      "$(basename "$(realpath "$model")")" | xz -T0 -6 > "$payload/model.tar.xz" ;;
esac

# ---------------------------------------------------------------------------------------------------------- parts
git describe --always --dirty > "$payload/commit"
say "commit $(cat "$payload/commit")"
bash scripts/gpu/parts.sh "$payload" "$out" "${part_mb}M" >&2
