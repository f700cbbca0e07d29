"""Environment, timing and vLLM-style log output (every line flushed at once)."""

import os
import socket
import sys
import threading
import time

RESET = "\x1b[0m"
LEVEL_COLOR = {"WARNING": "\x1b[33m", "ERROR": "\x1b[31m", "CRITICAL": "\x1b[31m"}
VLLM_PREFIX_COLOR = "\x1b[1;36m"  # vLLM decorate_logs: (APIServer pid=1), (EngineCore_DP0 pid=89)
VLLM_PREFIX_RESET = "\x1b[0;0m"
RAY_PREFIX_COLOR = "\x1b[36m"  # Ray log_to_driver: (RayWorkerWrapper pid=4009, ip=...)
PY = "/usr/local/lib/python3.12/dist-packages"

_out_lock = threading.Lock()


def env_str(name, default=""):
    v = os.environ.get(name)
    return default if v is None or v == "" else v


def env_float(name, default):
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return float(default)


def env_int(name, default):
    try:
        return int(float(os.environ.get(name, "") or default))
    except ValueError:
        return int(default)


def time_scale():
    return max(0.0, env_float("SPARK_EMU_TIME_SCALE", 1.0))


def fault_name():
    return env_str("SPARK_EMU_FAULT", "").strip().lower()


def state_dir():
    return env_str("SPARK_EMU_STATE_DIR", "/tmp/ray")


def interface_ipv4s():
    """{interface: its first IPv4 address} of this network namespace (SIOCGIFADDR)."""
    import fcntl
    import struct

    found = {}
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name[:15].encode())
                found[name] = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])
            except OSError:  # no IPv4 address
                pass
    finally:
        s.close()
    return found


def hostname():
    try:
        return socket.gethostname()
    except OSError:
        return "localhost"


def out(text):
    """Write text (may hold several lines) to stdout and flush immediately."""
    with _out_lock:
        try:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass


def ts():
    return time.strftime("%m-%d %H:%M:%S")


def vllm_prefix(name, pid):
    return "%s(%s pid=%d)%s " % (VLLM_PREFIX_COLOR, name, pid, VLLM_PREFIX_RESET)


def ray_prefix(name, pid, ip=None):
    inner = "%s pid=%d" % (name, pid) + (", ip=%s" % ip if ip else "")
    return "%s(%s)%s " % (RAY_PREFIX_COLOR, inner, RESET)


def vlog(level, src, msg, proc=""):
    """vLLM logger line(s): every line of a multi-line message gets the prefix
    (vLLM's NewLineFormatter), WARNING/ERROR level names are coloured."""
    lvl = LEVEL_COLOR[level] + level + RESET if level in LEVEL_COLOR else level
    head = "%s%s %s [%s] " % (proc, lvl, ts(), src)
    out("\n".join(head + line for line in str(msg).split("\n")))


def raw(text, proc=""):
    out("\n".join(proc + line for line in str(text).split("\n")))


def sleep_until(deadline):
    while True:
        d = deadline - time.monotonic()
        if d <= 0:
            return
        time.sleep(d if d < 0.05 else min(d - 0.001, 0.5) if d > 0.002 else d)


def die(code):
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(code)
