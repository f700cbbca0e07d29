#!/bin/sh
# spark-bot on an embedded two-node cluster: no Slack, no Sparks, no Docker, no root.
# Without arguments: a tour (launch, verify, bench, tear down; then a launch that fails on an
# injected NCCL fault, to show a failure notification). With arguments: `spark-bot demo ARGS`,
# e.g. scripts/demo.sh --run "/spark up" --fault oom, or no --run to type commands.
set -eu
cd "$(dirname "$0")/.."
sh scripts/python-env.sh >&2
if [ "$#" -gt 0 ]; then
    exec .venv/bin/spark-bot demo "$@"
fi
.venv/bin/spark-bot demo --run "/spark up" --run "/spark verify" --run "/spark bench max_tokens=16 runs=1" --run "/spark down"
echo
echo "=== the same launch with an injected fault (SPARK_EMU_FAULT=nccl_error): a failure notification ==="
.venv/bin/spark-bot demo --fault nccl_error --run "/spark up" || [ "$?" -eq 1 ]
