"""Stand-ins of Open MPI's `mpirun` and nccl-tests' `all_reduce_perf` on the lab's nodes, with the
real tools' arguments and output (NVIDIA/nccl-tests@a0b82b2260cf5152b9f8c061bbf7eaf0ba096432
src/util.cu writeDeviceReport, writeResultHeader, writeBenchmarkLinePreamble/Body and
writeResultFooter; tests/lab/emulator/test_nccl_tests.py holds them against those formats),
measuring a real transfer between the two ranks: each iteration both ranks send the buffer to
each other over TCP across the lab's fabric (a ring all-reduce of two ranks moves the buffer's
size each way), and the bus bandwidth is the size over the time, as nccl-tests computes it for
two ranks (src/all_reduce.cu AllReduceGetBw: algbw x 2(n-1)/n).

`mpirun -np 2 -H IP1:1,IP2:1 -x NAME=VALUE… TOOL ARGS` starts each rank over `ssh` to its host,
as Open MPI's rsh launcher does (the lab's nodes trust each other, lab/trust.py), giving it its
rank and the first host's address; only rank 0 prints, as nccl-tests prints on its main process.
"""

import os
import random
import shlex
import socket
import subprocess
import sys
import threading
import time

NCCL_TESTS_VERSION = "2.19.6"  # src/common.h at that commit
NCCL_VERSION_CODE = 22809  # the NCCL NVIDIA's playbook pins (2.28.9)
CONNECT_WINDOW_S = 30.0


def _mpirun_args(argv):
    hosts, env, i, np_ = [], {}, 0, None
    while i < len(argv):
        arg = argv[i]
        if arg in ("-np", "-n", "--np"):
            np_ = int(argv[i + 1])
            i += 2
        elif arg in ("-H", "--host", "-host"):
            hosts = [h.split(":")[0] for h in argv[i + 1].split(",")]
            i += 2
        elif arg == "-x":
            name, _, value = argv[i + 1].partition("=")
            env[name] = value if _ else os.environ.get(name, "")
            i += 2
        elif arg.startswith("-"):
            sys.stderr.write("mpirun: the lab's stand-in does not take %s\n" % arg)
            return None
        else:
            return np_, hosts, env, argv[i:]
    return None


MPIRUN_VERSION = (
    "mpirun (Open MPI) 4.1.6\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
)


def _local(host):
    """Whether `host` is one of this node's addresses (Open MPI forks its local ranks)."""
    try:
        with socket.socket() as probe:
            probe.bind((host, 0))
        return True
    except OSError:
        return False


def mpirun_main(argv):
    if argv[:1] in (["--version"], ["-V"]):
        print(MPIRUN_VERSION, end="")
        return 0
    parsed = _mpirun_args(argv)
    if parsed is None or not parsed[3]:
        sys.stderr.write("usage: mpirun -np N -H HOST:1,HOST:1 [-x NAME=VALUE]... PROGRAM\n")
        return 1
    np_, hosts, env, program = parsed
    if np_ != len(hosts):
        sys.stderr.write("mpirun: -np %s does not match the %d hosts of -H\n" % (np_, len(hosts)))
        return 1
    port = random.randint(20000, 29999)
    ranks = []
    for rank, host in enumerate(hosts):
        exported = dict(
            env,
            OMPI_COMM_WORLD_RANK=str(rank),
            OMPI_COMM_WORLD_SIZE=str(np_),
            SPARK_EMU_MPI_ROOT="%s:%d" % (hosts[0], port),
        )
        command = ["env"] + ["%s=%s" % kv for kv in sorted(exported.items())] + program
        if not _local(host):
            command = ["ssh", "-o", "BatchMode=yes", host, shlex.join(command)]
        ranks.append(subprocess.Popen(command, stdout=None if rank == 0 else subprocess.DEVNULL))
    codes = [p.wait() for p in ranks]
    bad = next((c for c in codes if c), 0)
    if bad:
        sys.stderr.write("mpirun: a rank exited with status %d\n" % bad)
    return bad


def _size(text):
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    text = text.strip()
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def _args(argv):
    opts = {"minbytes": 32 * 2**20, "maxbytes": 32 * 2**20, "iters": 20, "warmup": 1, "ngpus": 1}
    names = {
        "-b": "minbytes",
        "--minbytes": "minbytes",
        "-e": "maxbytes",
        "--maxbytes": "maxbytes",
        "-n": "iters",
        "--iters": "iters",
        "-w": "warmup",
        "--warmup_iters": "warmup",
        "-g": "ngpus",
        "--ngpus": "ngpus",
    }
    i = 0
    while i < len(argv):
        if argv[i] in ("-h", "--help"):
            return None
        key = names.get(argv[i])
        if key is None:
            print("invalid option '%s'" % argv[i])
            return None
        value = argv[i + 1]
        opts[key] = _size(value) if key.endswith("bytes") else int(value)
        i += 2
    return opts


USAGE = (
    "USAGE: all_reduce_perf \n\t[-t,--nthreads <num threads>] \n\t"
    "[-g,--ngpus <gpus per thread>] \n\t[-b,--minbytes <min size in bytes>] \n\t"
    "[-e,--maxbytes <max size in bytes>] \n\t[-n,--iters <iteration count>] \n\t"
    "[-w,--warmup_iters <warmup iteration count>] \n"
)


def _peer(rank):
    host, _, port = os.environ["SPARK_EMU_MPI_ROOT"].rpartition(":")
    if rank == 0:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", int(port)))
        listener.listen(1)
        listener.settimeout(CONNECT_WINDOW_S)
        conn, _ = listener.accept()
        listener.close()
        return conn
    deadline = time.monotonic() + CONNECT_WINDOW_S
    while True:  # NCCL's bootstrap retries its connection to the root, as this does
        try:
            return socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _receive(conn, size):
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the peer rank closed the connection")
        data += chunk
    return data


def _exchange(conn, size):
    """Both ways at once: `size` bytes sent and `size` received."""
    block = b"\0" * (1 << 20)

    def send():
        left = size
        while left > 0:
            conn.sendall(block[: min(left, len(block))])
            left -= len(block)

    sender = threading.Thread(target=send)
    sender.start()
    left = size
    while left > 0:
        data = conn.recv(min(left, 1 << 20))
        if not data:
            raise ConnectionError("the peer rank closed the connection")
        left -= len(data)
    sender.join()


def _float(value, width):
    """nccl-tests' getFloatStr: %.2f, else %.1f, else %.0f, else exponent, in `width`."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        text = fmt % (width, value)
        if len(text) <= width:
            return text
    return ("%*.1e" if width >= 7 else "%*.0e") % (width, value)


def _lines_header(opts, hostname):
    return (
        [
            "# nccl-tests version %s nccl-headers=%d nccl-library=%d"
            % (NCCL_TESTS_VERSION, NCCL_VERSION_CODE, NCCL_VERSION_CODE),
            "# Collective test starting: all_reduce_perf",
            "# nThread 1 nGpus %d minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d "
            "agg iters: 1 validation: 1 graph: 0 unalign: 0"
            % (
                opts["ngpus"],
                opts["minbytes"],
                opts["maxbytes"],
                1048576,
                "bytes",
                opts["warmup"],
                opts["iters"],
            ),
            "#",
            "# Using devices",
        ]
        + [
            "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s"
            % (rank, 0, os.getpid(), host, 0, 0x000F, 0x01, 0x00, "NVIDIA GB10")
            for rank, host in enumerate(hostname)
        ]
        + [
            "#",
            "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
            % ("", "", "", "", ""),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
            % (
                "size",
                "count",
                "type",
                "redop",
                "root",
                "time",
                "algbw",
                "busbw",
                "#wrong",
                "time",
                "algbw",
                "busbw",
                "#wrong",
                0,
                "",
            ),
            "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s"
            % (
                "(B)",
                "(elements)",
                "",
                "",
                "",
                "(us)",
                "(GB/s)",
                "(GB/s)",
                "",
                "(us)",
                "(GB/s)",
                "(GB/s)",
                "",
                0,
                "",
            ),
        ]
    )


def all_reduce_perf_main(argv):
    opts = _args(argv)
    if opts is None:
        print(USAGE, end="")
        return 0
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    if size != 2 or "SPARK_EMU_MPI_ROOT" not in os.environ:
        sys.stderr.write("the lab's all_reduce_perf runs as two ranks under mpirun\n")
        return 1
    conn = _peer(rank)
    names = [socket.gethostname()]
    conn.sendall(names[0].encode()[:64].ljust(64))
    other = _receive(conn, 64).decode().strip()
    names = [*names, other] if rank == 0 else [other, *names]
    out = _lines_header(opts, names) if rank == 0 else []
    busbws = []
    nbytes = opts["minbytes"]
    while nbytes <= opts["maxbytes"]:
        for _ in range(opts["warmup"]):
            _exchange(conn, nbytes)
        row = "%12li  %12li  %8s  %6s  %6s" % (nbytes, nbytes // 4, "float", "sum", "%6i" % -1)
        for _place in ("out-of-place", "in-place"):
            started = time.monotonic()
            for _ in range(opts["iters"]):
                _exchange(conn, nbytes)
            seconds = (time.monotonic() - started) / opts["iters"]
            algbw = nbytes / 1.0e9 / seconds
            busbw = algbw * (2 * (size - 1)) / size
            busbws.append(busbw)
            row += "  %7s  %6s  %6s  %6g" % (
                _float(seconds * 1e6, 7),
                _float(algbw, 6),
                _float(busbw, 6),
                0,
            )
        out.append(row)
        nbytes += 1048576 if nbytes < opts["maxbytes"] else nbytes  # -i's default step, then done
    conn.close()
    if rank == 0:
        average = sum(busbws) / len(busbws)
        out += [
            "# %-20s : %d %s" % ("Out of bounds values", 0, "OK"),
            "# %-20s : %g %s" % ("Avg bus bandwidth", average, ""),
            "#",
            "# Collective test concluded: all_reduce_perf",
            "#",
            "",
        ]
        print("\n".join(out), flush=True)
    return 0
