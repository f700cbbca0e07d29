#!/bin/sh
# A wheelhouse for building the image without a registry (Dockerfile: --build-arg WHEELS=DIR):
# every wheel of requirements.lock (hashes checked), and the pip and setuptools the build stage
# runs. Needs a package index once; DIR must lie inside the build context (default .wheelhouse).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/.wheelhouse}
python=${PYTHON:-$here/.venv/bin/python}
mkdir -p "$out"
"$python" -m pip download --quiet --no-deps --require-hashes -r "$here/requirements.lock" -d "$out"
"$python" -m pip download --quiet --no-deps -d "$out" pip "setuptools>=68"
echo "$out"
