"""nvidia-smi (a GB10 as it really prints) and ibdev2netdev."""

import json
import os
import time
import uuid

from .common import env_int, hostname

DRIVER = "580.95.05"
CUDA = "13.0"
COMPUTE_CAPABILITY = (12, 1)  # GB10: sm_121

# RoCE device -> netdev, in the order a DGX Spark's `ibdev2netdev` prints them. Its ConnectX-7
# hangs off the GB10 by two PCIe x4 links (Socket Direct), so each QSFP port is seen twice: once
# per link, the second link's names in PCIe domain 2 (`enP2...`). Both come Up with the cable.
IB_DEVICES = [
    ("rocep1s0f0", "enp1s0f0np0"),
    ("rocep1s0f1", "enp1s0f1np1"),
    ("roceP2p1s0f0", "enP2p1s0f0np0"),
    ("roceP2p1s0f1", "enP2p1s0f1np1"),
]


def twin_of(netdev):
    """The port's netdev on the first PCIe link for a second-link name (enP2p1s0f1np1 ->
    enp1s0f1np1), else None."""
    return "enp" + netdev[len("enP2p") :] if netdev.startswith("enP2p") else None


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


def _state(field, default):
    """The node's GPU as the lab set it (`SPARK_LAB_GPU_STATE`, lab/node_boot.py), else idle."""
    try:
        with open(os.environ.get("SPARK_LAB_GPU_STATE", "")) as f:
            return json.load(f).get(field, default)
    except (OSError, ValueError):
        return default


def _figure(field, default, unit, form="%d"):
    return lambda i: (form % _state(field, default), unit)


# field -> (value, unit); the unit is printed after a value (not after [N/A]) unless `nounits`,
# and in the CSV header as `[unit]`. A GB10 has unified memory and no fan, power cap or ECC of its own:
# nvidia-smi answers those with [N/A] (memory.* too, as in the table's `Not Supported`).
NA = "[N/A]"
QUERY_FIELDS = {
    "name": lambda i: ("NVIDIA GB10", ""),
    "memory.total": lambda i: (NA, " MiB"),
    "memory.used": lambda i: (NA, " MiB"),
    "memory.free": lambda i: (NA, " MiB"),
    "memory.reserved": lambda i: (NA, " MiB"),
    "index": lambda i: (str(i), ""),
    "uuid": lambda i: (gpu_uuid(i), ""),
    "serial": lambda i: (NA, ""),
    "driver_version": lambda i: (DRIVER, ""),
    "vbios_version": lambda i: (NA, ""),
    "temperature.gpu": _figure("temperature.gpu", 42, ""),
    "utilization.gpu": lambda i: ("0", " %"),
    "utilization.memory": lambda i: (NA, ""),
    "pci.bus_id": lambda i: ("0000000F:01:00.0", ""),
    "compute_cap": lambda i: ("%d.%d" % COMPUTE_CAPABILITY, ""),
    "count": lambda i: ("1", ""),
    "pstate": lambda i: ("P8", ""),
    "persistence_mode": lambda i: ("Enabled", ""),
    "compute_mode": lambda i: ("Default", ""),
    "display_mode": lambda i: ("Enabled", ""),
    "display_active": lambda i: ("Disabled", ""),
    "mig.mode.current": lambda i: (NA, ""),
    "ecc.mode.current": lambda i: (NA, ""),
    "fan.speed": lambda i: (NA, ""),
    "power.draw": _figure("power.draw", 4.12, " W", "%.2f"),
    "power.limit": lambda i: (NA, " W"),
    "clocks.gr": lambda i: ("208", " MHz"),
    "clocks.sm": _figure("clocks.sm", 208, " MHz"),
    "clocks.mem": lambda i: (NA, " MHz"),
    "clocks.max.gr": lambda i: ("3003", " MHz"),
    "clocks.max.sm": _figure("clocks.max.sm", 3003, " MHz"),
    # NVML's clock event reasons, the bitmask as nvidia-smi prints it; idle (0x1) at P8
    "clocks_event_reasons.active": _figure("clocks_event_reasons.active", 0x1, "", "0x%016x"),
}
# nvidia-smi's other names for the same fields
QUERY_ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_serial": "serial",
    "gpu_bus_id": "pci.bus_id",
    "performance_state": "pstate",
    "temperature.gpu.current": "temperature.gpu",
    "clocks.current.graphics": "clocks.gr",
    "clocks.current.sm": "clocks.sm",
    "clocks.current.memory": "clocks.mem",
    "clocks.max.graphics": "clocks.max.gr",
    "clocks_throttle_reasons.active": "clocks_event_reasons.active",  # its older name
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
        bad = [f for f in fields if QUERY_ALIASES.get(f, f) not in QUERY_FIELDS]
        if bad:
            print('Field "%s" is not a valid field to query.' % bad[0], flush=True)
            print("", flush=True)
            return 2
        units = "nounits" not in fmt
        if "noheader" not in fmt:
            unit_of = {f: QUERY_FIELDS[QUERY_ALIASES.get(f, f)](0)[1].strip() for f in fields}
            header = [f + (" [%s]" % unit_of[f] if units and unit_of[f] else "") for f in fields]
            print(", ".join(header), flush=True)
        for g in range(n):
            cells = (QUERY_FIELDS[QUERY_ALIASES.get(f, f)](g) for f in fields)
            print(", ".join(v + (u if units and v != NA else "") for v, u in cells), flush=True)
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


def _port_up(netdev):
    # A node (the lab's) may carry only the first link's netdev: the twin is the same cable.
    base = os.environ.get("SPARK_EMU_SYS_CLASS_NET", "/sys/class/net")
    twin = twin_of(netdev)
    if twin and not os.path.exists(os.path.join(base, netdev)):
        return _iface_up(twin)
    return _iface_up(netdev)


def ibdev2netdev_main(argv):
    for dev, net in IB_DEVICES:
        print("%s port 1 ==> %s (%s)" % (dev, net, "Up" if _port_up(net) else "Down"), flush=True)
    return 0
