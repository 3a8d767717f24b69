#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine, then runs the whole suite.
#   - Chromium: Debian's `chromium` where apt exists (Playwright cannot download its own browser in
#     offline CI), else Playwright's own Chromium.
#   - Python: klein-web with the `test` extra (torch CPU, diffusers, transformers, onnx: the oracle).
#   - npm packages: installed by the first `klein-web build` (npm ci, pinned by package-lock.json).
# Extra arguments go to pytest, e.g. `scripts/test.sh -k server`.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

if [ -z "${KLEIN_CHROMIUM:-}" ] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  if command -v apt-get >/dev/null; then
    echo "== installing Debian chromium"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    NEED_PLAYWRIGHT_BROWSER=1
  fi
fi

echo "== installing Python packages"
PY=${PYTHON:-python3}
# torch first and pinned: a CPU build is all the tests need.
$PY -m pip install -q torch==2.13.0
$PY -m pip install -q -e '.[test]'
if [ "${NEED_PLAYWRIGHT_BROWSER:-0}" = 1 ]; then
  $PY -m playwright install chromium
fi

echo "== running the test suite"
exec $PY -m pytest "$@"
