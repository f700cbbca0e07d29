#!/usr/bin/env bash
# Every test, from a fresh machine: installs what is missing, then runs the whole suite
# (the lab tests bring the lab of emulated Sparks up themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# The real engine (vLLM CPU build, Ray) the real-engine tests run: built once, then cached.
.venv/bin/python -m lab prepare-real
exec .venv/bin/python -m pytest "$@"
