"""Dispatch: python3 -m emulator <tool> [args...]"""

import sys

TOOLS = (
    "vllm",
    "ray",
    "nvidia-smi",
    "ibdev2netdev",
    "drop-caches",
    "ib_write_bw",
    "mpirun",
    "all_reduce_perf",
    "dmesg",
    "journalctl",
)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in TOOLS:
        sys.stderr.write("usage: python3 -m emulator {%s} [args...]\n" % ",".join(TOOLS))
        return 2
    tool, rest = argv[0], argv[1:]
    if tool == "vllm":
        from .serve import main as run
    elif tool == "ray":
        from .ray_cli import main as run
    elif tool == "nvidia-smi":
        from .gpu_tools import nvidia_smi_main as run
    elif tool == "drop-caches":
        from .meminfo import drop_caches_main as run
    elif tool == "ib_write_bw":
        from .perftest import ib_write_bw_main as run
    elif tool == "mpirun":
        from .nccl_tests import mpirun_main as run
    elif tool == "all_reduce_perf":
        from .nccl_tests import all_reduce_perf_main as run
    elif tool == "dmesg":
        from .kernel_log import dmesg_main as run
    elif tool == "journalctl":
        from .kernel_log import journalctl_main as run
    else:
        from .gpu_tools import ibdev2netdev_main as run
    return run(rest)


if __name__ == "__main__":
    sys.exit(main() or 0)
