#!/bin/sh
# The Python environment, no root needed: .venv with exactly the locked versions (hashes
# checked), then spark-bot itself, editable. Idempotent; redone when the lock or pyproject change.
set -eu
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv || {
        echo "python-env.sh: '$PYTHON -m venv' failed; Python >= 3.11 with venv is needed (Debian: apt-get install python3-venv)" >&2
        exit 2
    }
fi
if ! cat requirements.lock pyproject.toml | cmp -s - .venv/.installed-lock 2>/dev/null; then
    .venv/bin/pip install -q --require-hashes -r requirements.lock
    .venv/bin/pip install -q --no-deps -e .
    cat requirements.lock pyproject.toml > .venv/.installed-lock
else
    echo "python-env.sh: Python environment up to date"
fi
