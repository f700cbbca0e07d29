#!/bin/sh
# Build context for the Dockerfile without a registry: the sources and the locked dependencies
# as installed in .venv (same Python 3.11 / Debian 12 ABI as the base image).
set -eu
out=${1:-build/docker}
here=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$out" && mkdir -p "$out"
cp "$here/Dockerfile" "$out/"
for pkg in bot handlers cluster lab; do
  (cd "$here" && tar --exclude=__pycache__ -cf - "$pkg") | tar -xf - -C "$out"
done
cp -a "$here"/.venv/lib/python3.11/site-packages "$out/site-packages"
rm -rf "$out"/site-packages/__editable__* "$out"/site-packages/spark_bot* "$out"/site-packages/pip "$out"/site-packages/_pytest "$out"/site-packages/pytest*
echo "$out"
