#!/usr/bin/env bash
# On the H200: lean mode with the compact set and the tiled VAE decode, GPU memory sampled every 100 ms.
set -uo pipefail
nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader -lms 100 > $OUT/smi.csv 2>&1 &
smi=$!
MODES=${MODES:-lean} bash /tmp/stage/run.sh
kill $smi
