"""A stand-in of perftest's `ib_write_bw` on the lab's nodes: the same arguments and the same
output (linux-rdma/perftest@00b55b6660d0170dabe2c1b49193e8fbe265086e, src/perftest_parameters.c
ctx_print_test_info and print_full_bw_report, src/perftest_parameters.h RESULT_LINE,
RESULT_FMT(_G), REPORT_FMT; tests/lab/test_fabric_tools.py holds it against them), measuring a
real transfer: the client writes to the server over a TCP connection across the lab's fabric for
-D seconds, and both print what the server received, as perftest's two ends print the client's
figures. The lab has no RDMA: the figure is the fabric's TCP throughput, and the device named
with -d must exist and be ACTIVE in the node's /sys/class/infiniband (lab/rdma.py).
"""

import os
import socket
import sys
import time

VERSION = "6.29"  # perftest's configure.ac at that commit
RESULT_LINE = "-" * 87
RESULT_FMT = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
RESULT_FMT_G = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
DEF_PORT = 18515
DEF_SIZE = 65536
DEF_ITERS = 5000
CHUNK = 1 << 20


def _parse(argv):
    opts = {
        "device": None,
        "port": DEF_PORT,
        "duration": None,
        "size": DEF_SIZE,
        "iters": DEF_ITERS,
        "gbits": False,
        "server": None,
        "version": False,
    }
    takes = {
        "-d": "device",
        "--ib-dev": "device",
        "-p": "port",
        "--port": "port",
        "-D": "duration",
        "--duration": "duration",
        "-s": "size",
        "--size": "size",
        "-n": "iters",
        "--iters": "iters",
        "-i": None,
        "--ib-port": None,
        "-x": None,
        "--gid-index": None,
    }
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, _, inline = arg.partition("=")
        if key in takes:
            value = inline if inline else argv[i + 1]
            i += 0 if inline else 1
            if takes[key]:
                opts[takes[key]] = value if takes[key] == "device" else int(value)
        elif arg == "--report_gbits":
            opts["gbits"] = True
        elif arg in ("-V", "--version"):
            opts["version"] = True
        elif arg in ("-F", "--CPU-freq"):
            pass
        elif arg.startswith("-"):
            sys.stderr.write(" Invalid Command or flag.\n")
            return None
        else:
            opts["server"] = arg
        i += 1
    return opts


def _device_active(name):
    base = os.environ.get("SPARK_EMU_SYS_CLASS_INFINIBAND", "/sys/class/infiniband")
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        devices = []
    if not devices:
        sys.stderr.write("No IB devices found\n")
        return None
    name = name or devices[0]
    if name not in devices:
        sys.stderr.write("IB device %s not found\n" % name)
        sys.stderr.write(" Unable to find the Infiniband/RoCE device\n")
        return None
    with open(os.path.join(base, name, "ports", "1", "state")) as f:
        if "ACTIVE" not in f.read():
            sys.stderr.write(" Unable to Connect the HCA's through the link\n")
            return None
    return name


def _gid(address):
    return ":".join(["00"] * 10 + ["255", "255"] + ["%02d" % int(p) for p in address.split(".")])


def _test_info(device, client):
    lines = [
        RESULT_LINE,
        "                    RDMA_Write BW Test",
        " Dual-port       : OFF\t\tDevice         : %s" % device,
        " Number of qps   : 1\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON\t\tLock-free      : OFF",
        " ibv_wr* API     : ON\t\tUsing Enhanced Reorder      : OFF",
    ]
    if client:
        lines.append(" TX depth        : 128")
    lines += [
        " CQ Moderation   : 1",
        " CQE Poll Batch  : 16",
        " Mtu             : 4096[B]",
        " Link type       : Ethernet",
        " GID index       : 3",
        " Max inline data : 0[B]",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        RESULT_LINE,
    ]
    return lines


def _addresses(sock, qpn):
    local, remote = sock.getsockname()[0], sock.getpeername()[0]
    out = []
    for side, addr in (("local", local), ("remote", remote)):
        # C's %#04x prints a LID of 0 as 0000 (no 0x for zero), Python's as 0x00
        out.append(
            " %s address: LID 0000 QPN %#06x PSN %#06x RKey %#08x VAddr %#016x"
            % (side, qpn, 0x5E41F9, 0x1A03ED, 0xF374277DD000)
        )
        out.append(" GID: %s" % _gid(addr))
    return out


def _table(opts, received, seconds):
    iterations = received // opts["size"]
    gbps = received * 8 / seconds / 1e9
    avg = gbps if opts["gbits"] else received / seconds / 2**20
    rate = iterations / seconds / 1e6
    peak = 0.0 if opts["duration"] else avg
    header = RESULT_FMT_G if opts["gbits"] else RESULT_FMT
    row = " %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f" % (
        opts["size"],
        iterations,
        peak,
        avg,
        rate,
    )
    return [RESULT_LINE, header, row, RESULT_LINE]


def _say(lines):
    for line in lines:
        print(line, flush=True)


def _serve(opts, device):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("0.0.0.0", opts["port"]))
    except OSError:
        sys.stderr.write(" Unable to init the socket connection\n")
        return 1
    _say(
        [
            "",
            "************************************",
            "* Waiting for client to connect... *",
            "************************************",
        ]
    )
    listener.listen(1)
    conn, _ = listener.accept()
    listener.close()
    with conn:
        _say(_test_info(device, client=False) + _addresses(conn, 0x01A9))
        received, started = 0, None
        while True:
            data = conn.recv(CHUNK)
            if started is None:
                started = time.monotonic()
            if not data:
                break
            received += len(data)
        seconds = max(time.monotonic() - (started or time.monotonic()), 1e-6)
        conn.sendall(b"%d %.9f\n" % (received, seconds))
    _say(_table(opts, received, seconds))
    return 0


def _client(opts, device):
    try:
        conn = socket.create_connection((opts["server"], opts["port"]), timeout=10)
    except OSError:
        sys.stderr.write("Couldn't connect to %s:%d\n" % (opts["server"], opts["port"]))
        sys.stderr.write(" Unable to init the socket connection\n")
        return 1
    conn.settimeout(None)
    with conn:
        _say(_test_info(device, client=True) + _addresses(conn, 0x0129))
        block = b"\0" * CHUNK
        if opts["duration"]:
            deadline = time.monotonic() + opts["duration"]
            while time.monotonic() < deadline:
                conn.sendall(block)
        else:
            left = opts["size"] * opts["iters"]
            while left > 0:
                conn.sendall(block[: min(left, CHUNK)])
                left -= CHUNK
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while not answer.endswith(b"\n"):
            data = conn.recv(64)
            if not data:
                sys.stderr.write(" Failed to exchange data between server and clients\n")
                return 1
            answer += data
    received, seconds = answer.split()
    _say(_table(opts, int(received), float(seconds)))
    return 0


def ib_write_bw_main(argv):
    opts = _parse(argv)
    if opts is None:
        return 1
    if opts["version"]:
        print("Version: %s" % VERSION, flush=True)
        return 1  # perftest returns FAILURE after printing its version
    if opts["duration"]:
        print(" WARNING: BW peak won't be measured in this run.", flush=True)
    device = _device_active(opts["device"])
    if device is None:
        return 1
    return _client(opts, device) if opts["server"] else _serve(opts, device)
