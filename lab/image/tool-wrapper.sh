#!/bin/sh
# @TOOL@ inside the spark-lab image: the emulator stands in for the real tool.
export PYTHONPATH="/opt/spark-emu${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m emulator @TOOL@ "$@"
