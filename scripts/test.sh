#!/usr/bin/env bash
# Installs everything the test suite needs into a virtualenv of its own, then runs the whole suite (the full lane:
# browser, slow and make-tiny tests too) and lists the slowest tests. docs/development-testing.md describes the lanes.
#   - Python: a virtualenv in .venv-test (git-ignored; KLEIN_TEST_VENV names another folder), made with
#     `python3 -m venv` from the base interpreter, so it works inside an activated virtualenv and outside one and
#     never reads the machine's own packages. Debian's python3-venv is installed with apt where venv is missing.
#     Into it: torch 2.13.0 (a CPU build is all the tests need), then klein-web with the `test` extra, every
#     package pinned by constraints-test.txt.
#   - Chromium: $KLEIN_CHROMIUM if set, else the machine's `chromium`, else Debian's `chromium` where apt exists
#     (Playwright cannot download its own browser in offline CI), else Playwright's own Chromium. The tests use the
#     one named here (KLEIN_CHROMIUM is exported), and its version is printed.
#   - npm packages: installed by the first `klein-web build` (npm ci, pinned by package-lock.json).
#   - pytest-xdist: a worker per core, up to 4 (KLEIN_TEST_WORKERS sets it).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -k server`.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi
apt_install() {
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

PY=${PYTHON:-python3}
VENV=${KLEIN_TEST_VENV:-.venv-test}

echo "== Python virtualenv: $VENV"
if [ ! -x "$VENV/bin/python" ]; then
  # The venv module and ensurepip (pip inside the new venv); Debian ships them apart, as python3-venv.
  if ! "$PY" -c "import venv, ensurepip" 2>/dev/null; then
    if command -v apt-get >/dev/null; then
      echo "== installing Debian python3-venv"
      apt_install python3-venv
    fi
  fi
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
fi
VENV=$(cd "$VENV" && pwd)
VPY="$VENV/bin/python"
# The venv's own interpreter and packages only: nothing of an activated virtualenv or a PYTHONPATH leaks in.
unset PYTHONPATH PYTHONHOME
export VIRTUAL_ENV="$VENV"
export PATH="$VENV/bin:$PATH"

echo "== installing Python packages (pinned by constraints-test.txt)"
"$VPY" -m pip install -q -c constraints-test.txt torch==2.13.0
"$VPY" -m pip install -q -c constraints-test.txt -e '.[test]'

if [ -z "${KLEIN_CHROMIUM:-}" ]; then
  for name in chromium chromium-browser; do
    if command -v "$name" >/dev/null; then KLEIN_CHROMIUM=$(command -v "$name"); break; fi
  done
fi
if [ -z "${KLEIN_CHROMIUM:-}" ]; then
  if command -v apt-get >/dev/null; then
    echo "== installing Debian chromium"
    apt_install chromium
    KLEIN_CHROMIUM=$(command -v chromium)
  else
    "$VPY" -m playwright install chromium
    KLEIN_CHROMIUM=$("$VPY" -c "from builder.check.driver.chromium import find_chromium; print(find_chromium())")
  fi
fi
export KLEIN_CHROMIUM
echo "== Chromium: $KLEIN_CHROMIUM ($("$KLEIN_CHROMIUM" --version 2>/dev/null | tail -1))"

# A pytest-xdist worker per core (at most 4: each may run a Chromium and a torch model at once), each test file
# kept on one worker so its module fixtures are made once; KLEIN_TEST_WORKERS sets the count (1: no workers).
CORES=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
WORKERS=${KLEIN_TEST_WORKERS:-$((CORES < 4 ? CORES : 4))}
PARALLEL=()
if [ "$WORKERS" -gt 1 ]; then PARALLEL=(-n "$WORKERS" --dist loadfile); fi
echo "== running the test suite (full lane, ${WORKERS} worker(s))"
exec "$VPY" -m pytest --full --durations=30 "${PARALLEL[@]}" "$@"
