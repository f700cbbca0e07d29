"""Emulated Ray CLI: `ray start --head|--address`, `ray status`, `ray stop`, `ray --version`.

The head runs an emulated GCS: a small HTTP/JSON server on --node-ip-address:--port holding
the node registry (node ip, GPUs, Ray/Python version, heartbeat) and the placement groups.
Its address is written to $SPARK_EMU_STATE_DIR/ray_current_cluster (as Ray does in /tmp/ray).
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import faults as F
from . import nccl_lib
from .common import env_int, env_str, fault_name, interface_ipv4s, out, state_dir, time_scale

DEFAULT_RAY_VERSION = "2.49.1"
PY_VERSION = "3.12.3"
HEAD_PROCS = (
    7  # gcs_server, raylet, dashboard, log_monitor, monitor, dashboard_agent, runtime_env_agent
)
WORKER_PROCS = 4  # raylet, log_monitor, dashboard_agent, runtime_env_agent


def ray_version():
    return env_str("SPARK_EMU_RAY_VERSION", DEFAULT_RAY_VERSION)


def python_version():
    return env_str("SPARK_EMU_PYTHON_VERSION", PY_VERSION)


def heartbeat_timeout():
    """Seconds without heartbeat before a node is marked dead (Ray: ~30 s; scaled, >= 1 s)."""
    v = os.environ.get("SPARK_EMU_RAY_HEARTBEAT_TIMEOUT_S")
    if v:
        return float(v)
    return max(1.0, 30.0 * time_scale())


def node_memory():
    return {
        "cpus": float(env_int("SPARK_EMU_CPUS", 20)),
        "memory": 85.27 * 2**30,
        "object_store_memory": 36.54 * 2**30,
    }


def default_ip():
    for k in ("RAY_NODE_IP_ADDRESS", "RAY_OVERRIDE_NODE_IP_ADDRESS", "VLLM_HOST_IP"):
        if os.environ.get(k):
            return os.environ[k]
    return "127.0.0.1"


def cluster_file():
    return os.path.join(state_dir(), "ray_current_cluster")


def read_cluster_address():
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"].replace("ray://", "").replace("http://", "")
    try:
        with open(cluster_file()) as f:
            return f.read().strip() or None
    except OSError:
        return None


# ------------------------------------------------------------------------------------------
# GCS client
# ------------------------------------------------------------------------------------------
def gcs_call(address, path, payload=None, timeout=2.0):
    url = "http://%s%s" % (address, path)
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(
        url,
        data=data,
        method="POST" if data is not None else "GET",
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"{}")


# ------------------------------------------------------------------------------------------
# GCS server (head)
# ------------------------------------------------------------------------------------------
class GCS:
    def __init__(self, head_ip, port, gpus):
        self.lock = threading.Lock()
        self.head_ip = head_ip
        self.port = port
        self.nodes = {}
        self.pgs = {}
        self.failures = []
        self.session = "session_%s_%06d" % (
            time.strftime("%Y-%m-%d_%H-%M-%S"),
            os.getpid() % 1000000,
        )
        self.head_id = uuid.uuid4().hex + uuid.uuid4().hex[:24]
        self.register(
            {
                "node_id": self.head_id,
                "ip": head_ip,
                "gpus": gpus,
                "is_head": True,
                "ray_version": ray_version(),
                "python_version": python_version(),
                "pid": os.getpid(),
            }
        )

    def register(self, n):
        n = dict(n)
        n.update(node_memory())
        n["alive"] = True
        n["last_hb"] = time.monotonic()
        n["start"] = time.time()
        with self.lock:
            self.nodes[n["node_id"]] = n

    def heartbeat(self, node_id):
        with self.lock:
            n = self.nodes.get(node_id)
            if not n or not n["alive"]:
                return False
            n["last_hb"] = time.monotonic()
            return True

    def reap(self):
        to = heartbeat_timeout()
        now = time.monotonic()
        with self.lock:
            for n in self.nodes.values():
                if n["alive"] and not n.get("is_head") and now - n["last_hb"] > to:
                    n["alive"] = False
                    self.failures.append(n)
            for pid, pg in list(self.pgs.items()):
                if now - pg["last_hb"] > max(2.0, to):
                    del self.pgs[pid]
            head = self.nodes.get(self.head_id)
            if head:
                head["last_hb"] = now

    def info(self):
        with self.lock:
            nodes = [{k: v for k, v in n.items() if k != "last_hb"} for n in self.nodes.values()]
            for n in nodes:
                n["hb_age"] = 0.0
            used = {}
            for pg in self.pgs.values():
                for nid, g in pg["alloc"].items():
                    used[nid] = used.get(nid, 0) + g
            return {
                "nodes": nodes,
                "pgs": list(self.pgs.values()),
                "used": used,
                "ray_version": ray_version(),
                "python_version": python_version(),
                "head_ip": self.head_ip,
                "port": self.port,
                "session": self.session,
                "failures": [{"node_id": f["node_id"], "ip": f["ip"]} for f in self.failures],
            }


def make_gcs_server(gcs, host, port):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _reply(self, obj, code=200):
            b = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)

        def do_GET(self):
            if self.path == "/api/cluster":
                return self._reply(gcs.info())
            self._reply({"error": "not found"}, 404)

        def do_POST(self):
            n = int(self.headers.get("content-length") or 0)
            try:
                req = json.loads(self.rfile.read(n) or b"{}")
            except ValueError:
                return self._reply({"error": "bad json"}, 400)
            if self.path == "/api/register":
                gcs.register(req)
                return self._reply({"ok": True})
            if self.path == "/api/heartbeat":
                ok = gcs.heartbeat(req.get("node_id"))
                return self._reply({"ok": ok}, 200 if ok else 410)
            if self.path == "/api/unregister":
                with gcs.lock:
                    nd = gcs.nodes.get(req.get("node_id"))
                    if nd:
                        nd["alive"] = False
                return self._reply({"ok": True})
            if self.path == "/api/pg":
                with gcs.lock:
                    req["last_hb"] = time.monotonic()
                    gcs.pgs[req["pg_id"]] = req
                return self._reply({"ok": True})
            if self.path == "/api/pg_heartbeat":
                with gcs.lock:
                    pg = gcs.pgs.get(req.get("pg_id"))
                    if pg:
                        pg["last_hb"] = time.monotonic()
                return self._reply({"ok": bool(pg)})
            if self.path == "/api/pg_remove":
                with gcs.lock:
                    gcs.pgs.pop(req.get("pg_id"), None)
                return self._reply({"ok": True})
            self._reply({"error": "not found"}, 404)

    class S(ThreadingHTTPServer):
        daemon_threads = True
        allow_reuse_address = True

    return S((host, port), H)


# ------------------------------------------------------------------------------------------
# pid bookkeeping for `ray stop`
# ------------------------------------------------------------------------------------------
def _pid_dir():
    d = os.path.join(state_dir(), "emu_pids")
    os.makedirs(d, exist_ok=True)
    return d


def _write_pid(role):
    with open(os.path.join(_pid_dir(), "%d.pid" % os.getpid()), "w") as f:
        f.write(role)


def _remove_pid():
    try:
        os.unlink(os.path.join(_pid_dir(), "%d.pid" % os.getpid()))
    except OSError:
        pass


# ------------------------------------------------------------------------------------------
# texts
# ------------------------------------------------------------------------------------------
USAGE_STATS = (
    "Usage stats collection is enabled. To disable this, add `--disable-usage-stats` to the command "
    "that starts the cluster, or run the following command: `ray disable-usage-stats` before starting "
    "the cluster. See https://docs.ray.io/en/master/cluster/usage-stats.html for more details."
)


def head_text(ip, port):
    return """%s

Local node IP: %s

--------------------
Ray runtime started.
--------------------

Next steps
  To add another node to this Ray cluster, run
    ray start --address='%s:%d'

  To connect to this Ray cluster:
    import ray
    ray.init(_node_ip_address='%s')

  To submit a Ray job using the Ray Jobs CLI:
    RAY_ADDRESS='http://%s:8265' ray job submit --working-dir . -- python my_script.py

  See https://docs.ray.io/en/latest/cluster/running-applications/job-submission/index.html
  for more information on submitting Ray jobs to the Ray cluster.

  To terminate the Ray runtime, run
    ray stop

  To view the status of the cluster, use
    ray status

  To monitor and debug Ray, view the dashboard at
    %s:8265

  If connection to the dashboard fails, check your firewall settings and network configuration.""" % (
        USAGE_STATS,
        ip,
        ip,
        port,
        ip,
        ip,
        ip,
    )


def worker_text(ip):
    return (
        """Local node IP: %s

--------------------
Ray runtime started.
--------------------

To terminate the Ray runtime, run
  ray stop"""
        % ip
    )


BLOCK_TEXT = """--block
  This command will now block forever until terminated by a signal.
  Running subprocesses are monitored and a message will be printed if any of them terminate unexpectedly. Subprocesses exit with SIGTERM will be treated as graceful, thus NOT reported."""


def rlog(level, src, msg):
    """Ray's own logger format: 2025-11-30 05:42:03,123	INFO scripts.py:1031 -- msg"""
    t = time.time()
    out(
        "%s,%03d\t%s %s -- %s"
        % (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)),
            int(t * 1000) % 1000,
            level,
            src,
            msg,
        )
    )


# ------------------------------------------------------------------------------------------
# ray start
# ------------------------------------------------------------------------------------------
def _parser():
    p = argparse.ArgumentParser(prog="ray start", add_help=True)
    p.add_argument("--head", action="store_true")
    p.add_argument("--address", default=None)
    p.add_argument("--port", type=int, default=6379)
    p.add_argument("--node-ip-address", default=None)
    p.add_argument("--block", action="store_true")
    p.add_argument("--num-gpus", type=int, default=None)
    p.add_argument("--num-cpus", type=int, default=None)
    p.add_argument("--dashboard-host", default=None)
    p.add_argument("--dashboard-port", default=None)
    p.add_argument("--include-dashboard", default=None)
    p.add_argument("--disable-usage-stats", action="store_true")
    p.add_argument("--object-store-memory", default=None)
    p.add_argument("--resources", default=None)
    p.add_argument("--temp-dir", default=None)
    p.add_argument("--node-manager-port", default=None)
    p.add_argument("--object-manager-port", default=None)
    p.add_argument("--_emu-daemon", dest="emu_daemon", default=None, help=argparse.SUPPRESS)
    return p


def _daemonize(argv, ready_file):
    """Run the same `ray start` with --block in a new session; wait until it is ready."""
    pkg = __package__ or "emulator"
    cmd = (
        [sys.executable, "-m", pkg, "ray", "start"]
        + [a for a in argv if a != "--block"]
        + ["--block", "--_emu-daemon", ready_file]
    )
    log_path = os.path.join(state_dir(), "emu_ray_%d.log" % os.getpid())
    with open(log_path, "w") as log:  # the daemon keeps its own copy
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(ready_file):
            return 0
        rc = proc.poll()
        if rc is not None:
            with open(log_path) as f:
                sys.stdout.write(f.read())
            sys.stdout.flush()
            return rc
        time.sleep(0.05)
    return 1


def _ready(args):
    if args.emu_daemon:
        with open(args.emu_daemon, "w") as f:
            f.write(str(os.getpid()))


def start_main(argv):
    args = _parser().parse_args(argv)
    os.makedirs(state_dir(), exist_ok=True)
    gpus = args.num_gpus if args.num_gpus is not None else env_int("SPARK_EMU_GPUS", 1)
    ip = args.node_ip_address or default_ip()
    if not args.block and not args.emu_daemon:
        # daemonise: the child prints into a log; we print the start text once it is up
        ready = os.path.join(
            state_dir(), "emu_ready_%d_%d" % (os.getpid(), int(time.time() * 1000))
        )
        rc = _daemonize(argv, ready)
        try:
            os.unlink(ready)
        except OSError:
            pass
        if rc == 0:
            out(head_text(ip, args.port) if args.head else worker_text(ip))
        return rc
    quiet = bool(args.emu_daemon)

    stopping = threading.Event()

    def on_term(signum, frame):
        stopping.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    if args.head:
        try:
            gcs = GCS(ip, args.port, gpus)
            srv = make_gcs_server(gcs, ip, args.port)
        except OSError as e:
            out(
                "ConnectionError: Ray is trying to start at %s:%d, but is already running at %s:%d or the port "
                "is in use: %s" % (ip, args.port, ip, args.port, e)
            )
            return 1
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        with open(cluster_file(), "w") as f:
            f.write("%s:%d" % (ip, args.port))
        _write_pid("head:%d" % HEAD_PROCS)
        if not quiet:
            out(head_text(ip, args.port))
            out(BLOCK_TEXT)
        _ready(args)
        try:
            while not stopping.is_set():
                gcs.reap()
                stopping.wait(0.2)
        finally:
            srv.shutdown()
            _remove_pid()
            try:
                with open(cluster_file()) as f:
                    if f.read().strip() == "%s:%d" % (ip, args.port):
                        os.unlink(cluster_file())
            except OSError:
                pass
        return 0

    # ---- worker node ----
    if not args.address:
        out("ray start: error: either --head or --address must be given")
        return 2
    address = args.address.replace("ray://", "")
    fault = fault_name()
    if fault == "ray_worker_never_joins":
        # the node never registers: hang silently (as when the head's port is filtered)
        _write_pid("worker:%d" % WORKER_PROCS)
        while not stopping.is_set():
            stopping.wait(1.0)
        _remove_pid()
        return 0
    my_version = ray_version()
    if fault == "ray_version_mismatch":
        my_version = F.FAULTS["ray_version_mismatch"]["ray_version"]
        if my_version == env_str("SPARK_EMU_RAY_VERSION", DEFAULT_RAY_VERSION):
            my_version = "2.48.1"
    # connect to the GCS (5 s, scaled, at least 0.5 s)
    deadline = time.monotonic() + max(0.5, 5.0 * time_scale())
    info = None
    while True:
        try:
            info = gcs_call(address, "/api/cluster", timeout=0.5)
            break
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
    if info is None:
        host = address
        rlog(
            "WARNING",
            "utils.py:1591",
            "Unable to connect to GCS (ray head) at %s. Check that (1) Ray with matching version started "
            "successfully at the specified address, (2) this node can reach the specified address, and (3) there "
            "is no firewall setting preventing access." % host,
        )
        out(
            """Traceback (most recent call last):
  File "/usr/local/bin/ray", line 8, in <module>
    sys.exit(main())
  File "/usr/local/lib/python3.12/dist-packages/ray/scripts/scripts.py", line 2793, in main
    return cli()
  File "/usr/local/lib/python3.12/dist-packages/ray/scripts/scripts.py", line 920, in start
    bootstrap_address = services.canonicalize_bootstrap_address(address, temp_dir)
  File "/usr/local/lib/python3.12/dist-packages/ray/_private/services.py", line 414, in wait_for_node
    raise ConnectionError(
ConnectionError: Failed to connect to GCS at address %s within 5 seconds."""
            % host
        )
        return 1
    if (info["ray_version"], info["python_version"]) != (my_version, python_version()):
        out(
            """Traceback (most recent call last):
  File "/usr/local/bin/ray", line 8, in <module>
    sys.exit(main())
  File "/usr/local/lib/python3.12/dist-packages/ray/scripts/scripts.py", line 2793, in main
    return cli()
  File "/usr/local/lib/python3.12/dist-packages/ray/scripts/scripts.py", line 957, in start
    node = ray._private.node.Node(
  File "/usr/local/lib/python3.12/dist-packages/ray/_private/node.py", line 238, in __init__
    ray._private.utils.check_version_info(
  File "/usr/local/lib/python3.12/dist-packages/ray/_private/utils.py", line 1520, in check_version_info
    raise RuntimeError(error_message)
RuntimeError: Version mismatch: The cluster was started with:
    Ray: %s
    Python: %s
This process on node %s was started with:
    Ray: %s
    Python: %s
"""
            % (info["ray_version"], info["python_version"], ip, my_version, python_version())
        )
        return 1
    node_id = uuid.uuid4().hex + uuid.uuid4().hex[:24]
    try:
        gcs_call(
            address,
            "/api/register",
            {
                "node_id": node_id,
                "ip": ip,
                "gpus": gpus,
                "is_head": False,
                "hostname": socket.gethostname(),
                "ipv4": interface_ipv4s(),
                "nccl": nccl_lib.identity(),  # what this node's workers load
                "ray_version": my_version,
                "python_version": python_version(),
                "pid": os.getpid(),
            },
        )
    except (OSError, ValueError) as e:
        out(
            "ConnectionError: Failed to connect to GCS at address %s within 5 seconds. (%s)"
            % (address, e)
        )
        return 1
    _write_pid("worker:%d" % WORKER_PROCS)
    if not quiet:
        out(worker_text(ip))
        out(BLOCK_TEXT)
    _ready(args)
    interval = min(0.5, heartbeat_timeout() / 5.0)
    last_ok = time.monotonic()
    rc = 0
    try:
        while not stopping.is_set():
            try:
                gcs_call(address, "/api/heartbeat", {"node_id": node_id}, timeout=1.0)
                last_ok = time.monotonic()
            except urllib.error.HTTPError as e:
                if e.code == 410:  # the GCS marked us dead
                    out(
                        "Some Ray subprocesses exited unexpectedly:\n  raylet [exit code=1]\n"
                        "Remaining processes will be killed."
                    )
                    rc = 1
                    break
            except (OSError, ValueError):
                if time.monotonic() - last_ok > heartbeat_timeout():
                    out(
                        "Some Ray subprocesses exited unexpectedly:\n  raylet [exit code=1]\n"
                        "Remaining processes will be killed."
                    )
                    rc = 1
                    break
            stopping.wait(interval)
        if stopping.is_set():
            try:
                gcs_call(address, "/api/unregister", {"node_id": node_id}, timeout=1.0)
            except (OSError, ValueError):
                pass
    finally:
        _remove_pid()
    return rc


# ------------------------------------------------------------------------------------------
# ray status / stop
# ------------------------------------------------------------------------------------------
NO_CLUSTER = (
    "ConnectionError: Could not find any running Ray instance. Please specify the one to connect to by "
    "setting `--address` flag or `RAY_ADDRESS` environment variable."
)


def _fmt_bytes(b):
    return "%.2fGiB" % (b / 2**30)


def status_text(info):
    alive = [n for n in info["nodes"] if n["alive"]]
    used = info.get("used", {})
    now = time.time()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + ".%06d" % (
        int(now * 1e6) % 1000000
    )
    lines = ["======== Autoscaler status: %s ========" % stamp, "Node status", "-" * 63, "Active:"]
    for n in alive:
        lines.append(" 1 node_%s" % n["node_id"])
    lines += ["Pending:", " (no pending nodes)", "Recent failures:"]
    fails = info.get("failures") or []
    if fails:
        for f in fails:
            lines.append(" node_%s (%s)" % (f["node_id"], f["ip"]))
    else:
        lines.append(" (no failures)")
    cpus = sum(n["cpus"] for n in alive)
    gpus = sum(n["gpus"] for n in alive)
    gused = sum(v for k, v in used.items() if any(n["node_id"] == k for n in alive))
    mem = sum(n["memory"] for n in alive)
    osm = sum(n["object_store_memory"] for n in alive)
    lines += [
        "",
        "Resources",
        "-" * 63,
        "Usage:",
        " 0.0/%.1f CPU" % cpus,
        " %.1f/%.1f GPU" % (gused, gpus),
        " 0B/%s memory" % _fmt_bytes(mem),
        " 0B/%s object_store_memory" % _fmt_bytes(osm),
        "",
        "Demands:",
    ]
    pending = [pg for pg in info.get("pgs", []) if not pg.get("alloc")]
    if pending:
        for pg in pending:
            lines.append(
                " %s: 1+ pending placement groups"
                % ", ".join("%s * 1" % json.dumps(b).replace('"', "'") for b in pg["bundles"])
                + " (PACK)"
            )
    else:
        lines.append(" (no resource demands)")
    return "\n".join(lines)


def status_main(argv):
    p = argparse.ArgumentParser(prog="ray status")
    p.add_argument("--address", default=None)
    args = p.parse_args(argv)
    address = args.address or read_cluster_address()
    if not address:
        out(NO_CLUSTER)
        return 1
    try:
        info = gcs_call(address.replace("ray://", ""), "/api/cluster", timeout=2.0)
    except (OSError, ValueError):
        out("ConnectionError: Failed to connect to GCS at address %s within 5 seconds." % address)
        return 1
    out(status_text(info))
    return 0


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except (OSError, IndexError):
        return True


def stop_main(argv):
    d = _pid_dir()
    n = 0
    killed = []
    for fn in os.listdir(d):
        if not fn.endswith(".pid"):
            continue
        try:
            pid = int(fn[:-4])
            with open(os.path.join(d, fn)) as f:
                role = f.read()
        except (ValueError, OSError):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
            killed.append(pid)
            n += int(role.split(":")[1]) if ":" in role else 1
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.unlink(os.path.join(d, fn))
        except OSError:
            pass
    deadline = time.monotonic() + 10
    for pid in killed:
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
    if n == 0:
        out("Did not find any active Ray processes.")
    else:
        out("Stopped all %d Ray processes." % n)
    return 0


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        out(
            "Usage: ray [OPTIONS] COMMAND [ARGS]...\n\nCommands:\n  start   Start Ray processes manually on the local machine.\n"
            "  status  Print cluster status, including autoscaling info.\n  stop    Stop Ray processes manually on the local machine."
        )
        return 0 if argv else 2
    if argv[0] == "--version":
        out("ray, version %s" % ray_version())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "start":
        return start_main(rest)
    if cmd == "status":
        return status_main(rest)
    if cmd == "stop":
        return stop_main(rest)
    if cmd == "list" and rest[:1] == ["nodes"]:
        address = read_cluster_address()
        if not address:
            out(NO_CLUSTER)
            return 1
        info = gcs_call(address, "/api/cluster")
        for n in info["nodes"]:
            out(
                "node_%s  %s  %s  GPU=%s"
                % (n["node_id"], n["ip"], "ALIVE" if n["alive"] else "DEAD", n["gpus"])
            )
        return 0
    sys.stderr.write(
        "Usage: ray [OPTIONS] COMMAND [ARGS]...\nTry 'ray --help' for help.\n\nError: No such command '%s'.\n"
        % cmd
    )
    return 2
