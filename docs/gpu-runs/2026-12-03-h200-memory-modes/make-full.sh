#!/usr/bin/env bash
# On the H200: the full-size random-weight klein-4B diffusers folder (make-tiny --full-size) in /tmp/src.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .h200/c6/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
python3 -c "import torch, transformers, diffusers, onnx; print(torch.__version__, transformers.__version__, diffusers.__version__, onnx.__version__)"
nproc; free -g | sed -n 2p
[ -d /tmp/src/diffusers ] || time python3 -m builder make-tiny --full-size /tmp/src 2>&1 | grep -E "make-tiny|Error|error"
du -sh /tmp/src
