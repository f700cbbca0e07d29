"""nvidia-smi (a GB10 as it really prints) and ibdev2netdev."""

import os
import time
import uuid

from .common import env_int, hostname

DRIVER = "580.95.05"
CUDA = "13.0"

# RoCE device -> netdev (as on a DGX Spark's ConnectX-7)
IB_DEVICES = [
    ("rocep1s0f0", "enp1s0f0np0"),
    ("rocep1s0f1", "enp1s0f1np1"),
    ("roceP2p1s0f0", "enP2p1s0f0np0"),
    ("roceP2p1s0f1", "enP2p1s0f1np1"),
]
SHOWN_IB = [("rocep1s0f1", "enp1s0f1np1"), ("roceP2p1s0f1", "enP2p1s0f1np1")]


def gpu_uuid(i):
    import hashlib

    return "GPU-" + str(uuid.UUID(bytes=hashlib.md5(("%s-%d" % (hostname(), i)).encode()).digest()))


def _table(n):
    t = time.strftime("%a %b %d %H:%M:%S %Y")
    rows = []
    for i in range(n):
        rows.append(
            "|   %d  NVIDIA GB10                    On  |   0000000F:01:00.0  On |                  N/A |"
            % i
        )
        rows.append(
            "| N/A   42C    P8              4W /  N/A  | Not Supported          |      0%      Default |"
        )
        rows.append(
            "|                                         |                        |                  N/A |"
        )
        rows.append(
            "+-----------------------------------------+------------------------+----------------------+"
        )
    return """%s
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI %s             Driver Version: %s     CUDA Version: %s     |
+-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |
|                                         |                        |               MIG M. |
|=========================================+========================+======================|
%s

+-----------------------------------------------------------------------------------------+
| Processes:                                                                              |
|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |
|        ID   ID                                                               Usage      |
|=========================================================================================|
|  No running processes found                                                             |
+-----------------------------------------------------------------------------------------+""" % (
        t,
        DRIVER,
        DRIVER,
        CUDA,
        "\n".join(rows),
    )


QUERY_FIELDS = {
    "name": lambda i: "NVIDIA GB10",
    "memory.total": lambda i: "[N/A]",
    "memory.used": lambda i: "[N/A]",
    "memory.free": lambda i: "[N/A]",
    "index": lambda i: str(i),
    "uuid": lambda i: gpu_uuid(i),
    "driver_version": lambda i: DRIVER,
    "temperature.gpu": lambda i: "42",
    "utilization.gpu": lambda i: "0 %",
    "pci.bus_id": lambda i: "0000000F:01:00.0",
    "compute_cap": lambda i: "12.1",
    "count": lambda i: "1",
}


def nvidia_smi_main(argv):
    n = max(0, env_int("SPARK_EMU_GPUS", 1))
    if n == 0:
        print("No devices were found", flush=True)
        return 6
    query = None
    fmt = ""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--query-gpu="):
            query = a.split("=", 1)[1]
        elif a == "--query-gpu" and i + 1 < len(argv):
            query = argv[i + 1]
            i += 1
        elif a.startswith("--format="):
            fmt = a.split("=", 1)[1]
        elif a == "--format" and i + 1 < len(argv):
            fmt = argv[i + 1]
            i += 1
        elif a in ("-L", "--list-gpus"):
            for g in range(n):
                print("GPU %d: NVIDIA GB10 (UUID: %s)" % (g, gpu_uuid(g)), flush=True)
            return 0
        i += 1
    if query:
        fields = [f.strip() for f in query.split(",") if f.strip()]
        bad = [f for f in fields if f not in QUERY_FIELDS]
        if bad:
            print('Field "%s" is not a valid field to query.' % bad[0], flush=True)
            print("", flush=True)
            return 2
        if "noheader" not in fmt:
            print(", ".join(fields), flush=True)
        for g in range(n):
            print(", ".join(QUERY_FIELDS[f](g) for f in fields), flush=True)
        return 0
    print(_table(n), flush=True)
    return 0


def _iface_up(name):
    base = os.environ.get("SPARK_EMU_SYS_CLASS_NET", "/sys/class/net")
    p = os.path.join(base, name)
    if not os.path.exists(p):
        return False
    try:
        with open(os.path.join(p, "operstate")) as f:
            st = f.read().strip()
        if st == "up":
            return True
        if st == "unknown":  # veth/dummy report unknown: use the IFF_UP flag
            with open(os.path.join(p, "flags")) as f:
                return bool(int(f.read().strip(), 16) & 0x1)
        return False
    except (OSError, ValueError):
        return False


def ibdev2netdev_main(argv):
    for dev, net in SHOWN_IB:
        print("%s port 1 ==> %s (%s)" % (dev, net, "Up" if _iface_up(net) else "Down"), flush=True)
    return 0
