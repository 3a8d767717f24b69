#!/usr/bin/env bash
# On the GPU machine, after scripts/gpu/setup.sh, from the repository root: runs one command, its results and a
# record of the run in one folder.
#
#   bash scripts/gpu/run.sh FOLDER COMMAND [ARGS...]
#
# COMMAND is a klein-web command (browser-bench, load-bench, regress, kernel-lab, reference, bench, ...) or a
# script of scripts/ (scripts/read_bench.py, scripts/hash_bench.py, ...). For browser-bench, load-bench and regress
# it fills in --gpu, --browser, --models and --dist (the Chromium, model and app setup.sh unpacked) and where their
# results go (--out FOLDER; regress: --report FOLDER/report); for kernel-lab --gpu, --browser, --site (the lab
# setup.sh unpacked) and --out FOLDER/kernel-lab.json; all before ARGS, so ARGS can name any other, e.g.:
#
#   bash scripts/gpu/run.sh results/b512-lean browser-bench --precision q4f16 --sizes 512x512 --memory lean
#   bash scripts/gpu/run.sh results/regress-512 regress --precision q4f16 --size 512x512 --seed 42 \
#       --prompt "a red fox in the snow" --reference-from-cpu --psnr-min 40
#   bash scripts/gpu/run.sh results/read scripts/read_bench.py --gpu
#   bash scripts/gpu/run.sh results/attention kernel-lab --shapes real --kernel flash_attention --timeout 170
#
# FOLDER also gets output.log (all the command printed), smi.csv (nvidia-smi's memory use every 100 ms while it
# ran) and run.txt (the command, machine, GPU and driver, Chromium, the app's onnxruntime-web, the commit, the exit
# status, the seconds and nvidia-smi's peak). LIMIT (seconds, default 1800) stops a command that hangs. The exit
# status is the command's.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: bash scripts/gpu/run.sh FOLDER COMMAND [ARGS...]" >&2; exit 2; }
folder=$1 command=$2
shift 2
mkdir -p "$folder"
folder=$(cd "$folder" && pwd)
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/gpu/env.sh
source scripts/gpu/env.sh
[ -x "$KLEIN_CHROMIUM" ] || { echo "No Chromium at $KLEIN_CHROMIUM: run scripts/gpu/setup.sh until it says ready." >&2; exit 2; }

served=(--gpu --browser "$KLEIN_CHROMIUM" --models "$KLEIN_GPU_MODELS" --dist "$KLEIN_GPU_DIST")
case "$command" in
  browser-bench|load-bench) line=(python3 -m builder "$command" "${served[@]}" --out "$folder" "$@") ;;
  regress) line=(python3 -m builder regress "${served[@]}" --report "$folder/report" "$@") ;;
  kernel-lab) line=(python3 -m builder kernel-lab --gpu --browser "$KLEIN_CHROMIUM" --site "$KLEIN_GPU_LAB"
    --out "$folder/kernel-lab.json" "$@") ;;
  *.py) line=(python3 "$command" "$@") ;;
  *) line=(python3 -m builder "$command" "$@") ;;
esac

record=$folder/run.txt
{
  echo "command: ${line[*]}"
  echo "commit: $(git describe --always --dirty 2>/dev/null) (the parts: $(cat "${KLEIN_GPU_ROOT:-/tmp/klein-gpu}/payload/commit" 2>/dev/null))"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
  echo "cores: $(nproc)"
  echo "chromium: $("$KLEIN_CHROMIUM" --version 2>&1 | tail -1)"
  echo "app: $(grep -o '"onnxruntime_web": "[^"]*"' "$KLEIN_GPU_DIST/.klein-build.json" 2>/dev/null)"
  echo "started: $(date -u +%FT%TZ)"
} > "$record"

nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -lms 100 > "$folder/smi.csv" 2>&1 &
smi=$!
start=$(date +%s.%N)
timeout "${LIMIT:-1800}" "${line[@]}" 2>&1 | tee "$folder/output.log"
status=${PIPESTATUS[0]}
kill "$smi" 2>/dev/null
wait "$smi" 2>/dev/null
peak=$(awk -F', ' '{sub(/ MiB/, "", $2); if ($2 + 0 > peak) peak = $2 + 0} END {print peak + 0}' "$folder/smi.csv")
{
  echo "exit status: $status$([ "$status" = 124 ] && echo " (stopped after LIMIT=${LIMIT:-1800} s)")"
  echo "seconds: $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $start}")"
  echo "nvidia-smi peak: $peak MiB"
} >> "$record"
tail -3 "$record"
exit "$status"
