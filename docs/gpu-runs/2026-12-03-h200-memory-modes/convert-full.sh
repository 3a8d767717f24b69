#!/usr/bin/env bash
# On the H200: convert /tmp/src to the q4f16 web repository in /tmp/full.
set -uo pipefail
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
time timeout ${LIMIT:-580} python3 -m builder convert --precision ${PRECISION:-q4f16} ${JOBS:-} /tmp/src/diffusers /tmp/full 2>&1 \
  | grep -v "it/s\]" | tail -30
du -sh /tmp/full; ls /tmp/full
