#!/usr/bin/env bash
# Every test, from a fresh machine: installs what is missing, then runs the whole suite
# (the lab tests bring the lab of emulated Sparks up themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# The real engine (vLLM CPU build, Ray) the real-engine tests run: built once, then cached.
.venv/bin/python -m lab prepare-real
# Known vulnerabilities in the locked dependencies fail the run (a package that could not be
# audited is named, never passed silently). It runs before the tests, and the tests run either
# way, so one run reports both.
audit=0
.venv/bin/python scripts/audit_dependencies.py || audit=$?
# The static checks (configured in pyproject.toml): ruff's lint and format, mypy (strict on
# cluster/ and handlers/). Like the audit, a finding fails the run and the tests run either way.
checks=0
.venv/bin/ruff check . || checks=$?
.venv/bin/ruff format --check . || checks=$?
.venv/bin/mypy || checks=$?
tests=0
.venv/bin/python -m pytest "$@" || tests=$?
[ "$audit" -eq 0 ] || exit "$audit"
[ "$checks" -eq 0 ] || exit "$checks"
exit "$tests"
