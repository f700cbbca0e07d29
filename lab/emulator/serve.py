"""Emulated `vllm serve` (and `vllm --version`): vLLM's real flags, startup log lines,
Ray / multiprocessing multi-node behaviour, faults and the OpenAI-compatible API."""

import argparse
import hashlib
import json
import os
import signal
import socket
import string
import sys
import threading
import time

from . import dialects, model_files, nccl_lib, torch_build
from . import faults as F
from . import profiles as P
from .common import (
    PY,
    die,
    env_float,
    env_str,
    fault_name,
    hostname,
    interface_ipv4s,
    out,
    raw,
    ray_prefix,
    time_scale,
    vllm_prefix,
    vlog,
)

RAY_PG_TIMEOUT = 1800
STORE_TIMEOUT = 600


# ------------------------------------------------------------------------------------------
# argument parsing (vLLM's FlexibleArgumentParser behaviour)
# ------------------------------------------------------------------------------------------
def _bool_flag(p, name, default=None):
    p.add_argument(name, action=argparse.BooleanOptionalAction, default=default)


def build_parser():
    p = argparse.ArgumentParser(
        prog="vllm serve",
        usage="vllm serve [model_tag] [options]",
        description="Launch a local OpenAI-compatible API server to serve LLM completions via HTTP.",
    )
    p.add_argument("model_tag", nargs="?", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument(
        "--distributed-executor-backend",
        choices=["ray", "mp", "uni", "external_launcher"],
        default=None,
    )
    p.add_argument("--nnodes", "-n", type=int, default=1)
    p.add_argument("--node-rank", "-r", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29501)
    p.add_argument("--headless", action="store_true")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--max-model-len", default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--reasoning-parser", default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--load-format", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--swap-space", type=float, default=4)
    p.add_argument("--disable-log-requests", action="store_true")
    p.add_argument("--enable-log-requests", action="store_true")
    p.add_argument("--disable-log-stats", action="store_true")
    _bool_flag(p, "--enable-prefix-caching")
    _bool_flag(p, "--enable-chunked-prefill")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--quantization", "-q", default=None)
    p.add_argument("--download-dir", default=None)
    p.add_argument("--tokenizer", default=None)
    p.add_argument("--revision", default=None)
    p.add_argument("--enable-auto-tool-choice", action="store_true")
    p.add_argument("--tool-call-parser", default=None)
    p.add_argument("--chat-template", default=None)
    p.add_argument("--uvicorn-log-level", default="info")
    p.add_argument("--max-parallel-loading-workers", type=int, default=None)
    p.add_argument("--async-scheduling", action="store_true")
    p.add_argument("--speculative-config", default=None)
    p.add_argument("--compilation-config", "-O", default=None)
    p.add_argument("--limit-mm-per-prompt", default=None)
    return p


def normalize_argv(argv):
    """FlexibleArgumentParser: --foo_bar -> --foo-bar."""
    outv = []
    for a in argv:
        if a.startswith("--") and "_" in a.split("=", 1)[0]:
            k, sep, v = a.partition("=")
            a = k.replace("_", "-") + sep + v
        outv.append(a)
    return outv


def parse_len(v):
    if v is None:
        return None
    s = str(v).strip().lower()
    mult = 1
    if s.endswith("k"):
        mult, s = 1024, s[:-1]
    elif s.endswith("m"):
        mult, s = 1024 * 1024, s[:-1]
    return int(float(s) * mult)


# ------------------------------------------------------------------------------------------
# the launch
# ------------------------------------------------------------------------------------------
class Serve:
    def __init__(self, args):
        self.args = args
        self.model = args.model or args.model_tag or "Qwen/Qwen3-0.6B"
        self.served = args.served_model_name or [self.model]
        self.profile = P.get_profile()
        self.fault_name = fault_name()
        self.fault = F.get_fault(self.fault_name)
        if self.fault and self.fault.get("where") == "ray":
            self.fault = None  # ray-start faults act in `ray start`
        self.scale = time_scale()
        self.factor = (
            self.fault.get("time_factor", 1.0)
            if self.fault and self.fault.get("action") == "slow"
            else 1.0
        )
        self.pid = os.getpid()
        self.epid = self.pid + 88
        self.api = vllm_prefix("APIServer", self.pid)
        self.eng = vllm_prefix("EngineCore_DP0", self.epid)
        self.tp = args.tensor_parallel_size
        self.pp = args.pipeline_parallel_size
        self.world = self.tp * self.pp
        # the model's files in the container's HF cache, when there: weights and KV follow them
        self.kv_per_token = None
        files = model_files.load(self.model)
        if files is not None:
            self.profile["weights_gb"] = files["weights_bytes"] / 1e9
            self.kv_per_token = model_files.kv_bytes_per_token(
                files, self.tp, self.pp, args.kv_cache_dtype
            )
        self.gpus = max(0, int(env_float("SPARK_EMU_GPUS", 1)))
        self.host_ip = env_str("VLLM_HOST_IP", "") or None
        self.ranks = []
        self.ready = False
        self.dying = False
        self.fatal_lock = threading.Lock()
        self.engine = None
        self.httpd = None
        self.peers = []
        self.backend = None
        self.pg_id = None
        self.gcs_addr = None
        self.stop_evt = threading.Event()
        h = hashlib.sha1(("%s%d" % (self.model, self.pid)).encode()).hexdigest()
        self.ctx = {
            "py": PY,
            "actor": h[:32],
            "ns": h[8:16] + "-" + h[16:20] + "-" + h[20:24] + "-" + h[24:36],
            "node_id": h * 2,
            "gmu": args.gpu_memory_utilization,
            "total_gib": "%.2f" % P.GPU_TOTAL_GIB,
            "want_gib": "%.2f" % (args.gpu_memory_utilization * P.GPU_TOTAL_GIB),
            "free_gib": "%.2f" % env_float("SPARK_EMU_FREE_MEM_GIB", 119.5),
            "seq": "13527",
            "numel": "1048576",
            "numel2": "2097152",
            "rank": "0",
            "wip": "",
            "wpid": "",
            "master": args.master_addr,
            "port": args.master_port,
            "archs": " ".join(torch_build.arch_list()),
        }

    # ---- helpers ---------------------------------------------------------------------
    def nominal(self, phase):
        return self.profile["phases"].get(phase, 0.0) * self.factor

    def sleep(self, phase, extra=1.0):
        dt = self.nominal(phase) * extra * self.scale
        end = time.monotonic() + dt
        while True:
            if self.dying:
                self.block_forever()
            d = end - time.monotonic()
            if d <= 0:
                return
            time.sleep(min(d, 0.1))

    def block_forever(self):
        while True:
            time.sleep(3600)

    def a(self, level, src, msg):
        vlog(level, src, msg, self.api)

    def e(self, level, src, msg):
        vlog(level, src, msg, self.eng)

    def r(self, rank, level, src, msg):
        vlog(level, src, msg, rank["prefix"])

    def say(self, log, key, **values):
        """Log the dialect's line `key` (INFO) through `log`, unless this dialect prints none."""
        found = dialects.line(key, **values)
        if found:
            log("INFO", *found)

    def each(self, level, src, fn):
        for rk in self.ranks:
            if rk["visible"]:
                self.r(rk, level, src, fn(rk))

    def fill(self, text):
        c = dict(self.ctx)
        c["edate"] = time.strftime("%m%d %H:%M:%S") + ".%06d" % (int(time.time() * 1e6) % 1000000)
        return string.Template(text).safe_substitute(c)

    def local_rank(self):
        for rk in self.ranks:
            if rk["local"]:
                return rk
        return self.ranks[0] if self.ranks else {"prefix": self.eng, "rank": 0}

    def remote_rank(self):
        for rk in self.ranks:
            if not rk["local"] and rk["visible"]:
                return rk
        return self.local_rank()

    def print_lines(self, lines):
        for proc, level, src, text in lines:
            pref = {
                "api": self.api,
                "engine": self.eng,
                "local": self.local_rank()["prefix"],
                "remote": self.remote_rank()["prefix"],
                "plain": "",
            }.get(proc, "")
            text = self.fill(text)
            if level is None:
                raw(text, pref)
            else:
                vlog(level, src, text, pref)

    # ---- fatal paths -----------------------------------------------------------------
    def fatal(self, lines, dead=False, code=1):
        """Print the cause, then the engine-dead / init-failed tail and exit."""
        with self.fatal_lock:
            if self.dying:
                self.block_forever()
            self.dying = True
        self.print_lines(lines)
        if dead or self.ready:
            vlog("ERROR", "async_llm.py:480", self.fill(F.ENGINE_DEAD_TAIL), self.api)
        if self.ready:
            if self.engine:
                self.engine.kill()
            linger = env_float("SPARK_EMU_DEAD_LINGER_S", 3.0)
            time.sleep(linger)
            self.shutdown_lines()
        else:
            raw(self.fill(F.INIT_FAILED_TAIL), self.api)
        self.notify_peers({"t": "shutdown"})
        self.remove_pg()
        die(code)

    def strike(self, phase):
        f = self.fault
        if not f or f.get("unknown") or f.get("phase") != phase:
            return
        act = f["action"]
        if act == "hang":
            self.dying = True
            self.block_forever()
        if act == "remote_died":
            return self.remote_died("fault")
        if act == "serving_hang":
            self.engine.hang()
            threading.Thread(target=self.hang_warnings, daemon=True).start()
            return
        self.fatal(f["lines"], dead=(act == "engine_dead"))

    def hang_warnings(self):
        """vLLM's shm_broadcast.py warns every VLLM_RINGBUFFER_WARNING_INTERVAL (60 s) that a
        reader waits: printed while a request is stuck, as the real hang does."""
        interval = 60.0 * self.scale
        waited = 0.0
        while not self.dying:
            time.sleep(min(interval, 0.1) if interval > 0 else 0.1)
            waited = waited + 0.1 if self.engine.running > 0 else 0.0
            if interval > 0 and waited >= interval:
                waited = 0.0
                self.e(
                    "WARNING",
                    "shm_broadcast.py:466",
                    "No available shared memory broadcast block found in 60 seconds. This "
                    "typically happens when some processes are hanging or doing some "
                    "time-consuming work (e.g. compilation)",
                )

    def shutdown_lines(self):
        for m in (
            "Shutting down",
            "Waiting for application shutdown.",
            "Application shutdown complete.",
            "Finished server process [%d]" % self.pid,
        ):
            out("%sINFO:     %s" % (self.api, m))

    # ---- main sequence ---------------------------------------------------------------
    def run(self):
        args = self.args
        if self.fault and self.fault.get("unknown"):
            self.a(
                "WARNING",
                "faults.py:1",
                "SPARK_EMU_FAULT=%s is not a known fault (known: %s); ignored"
                % (self.fault_name, ", ".join(sorted(F.FAULTS))),
            )
            self.fault = None
        if args.headless:
            return self.run_headless()
        nd = {
            k: v
            for k, v in sorted(vars(args).items())
            if v not in (None, False) and v != build_parser().get_default(k)
        }
        nd["model"] = self.model
        if args.model_tag:
            nd["model_tag"] = args.model_tag
        self.say(self.a, "version_line")
        self.a("INFO", "utils.py:233", "non-default args: %r" % nd)
        if model_files.not_cached(self.model):
            raw(self.fill(model_files.NOT_CACHED_TB))
            return 1
        # reserve the API port early (vLLM creates the server socket before the engine)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((args.host or "0.0.0.0", args.port))
        except OSError as exc:
            raw(
                'Traceback (most recent call last):\n  File "%s/vllm/entrypoints/openai/api_server.py", line 1896, '
                "in create_server_socket\n    sock.bind(addr)\nOSError: [Errno %d] %s"
                % (PY, exc.errno, exc.strerror),
                self.api,
            )
            return 1
        self.sleep("startup", 0.5)
        if args.trust_remote_code:
            pass
        self.a("INFO", "model.py:547", "Resolved architecture: Qwen3_5MoeForConditionalGeneration")
        mml = parse_len(args.max_model_len) or P.NATIVE_MAX_MODEL_LEN
        if mml > P.NATIVE_MAX_MODEL_LEN:
            return self.config_error(
                "User-specified max_model_len (%d) is greater than the derived max_model_len (max_position_embeddings=%d "
                "or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var "
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1." % (mml, P.NATIVE_MAX_MODEL_LEN)
            )
        self.mml = mml
        self.a("INFO", "model.py:1510", "Using max model len %d" % mml)
        if P.NUM_ATTENTION_HEADS % self.tp:
            return self.config_error(
                "Total number of attention heads (%d) must be divisible by tensor parallel size (%d)."
                % (P.NUM_ATTENTION_HEADS, self.tp)
            )
        local_world = self.world // max(1, args.nnodes)
        backend = args.distributed_executor_backend
        if backend is None:
            backend = "mp" if (args.nnodes > 1 or self.world <= self.gpus) else "ray"
        self.backend = backend
        if backend == "mp" and local_world > self.gpus:
            return self.config_error(
                "World size (%d) is larger than the number of available GPUs (%d) in this node. If this is intentional "
                "and you are using:\n- ray, set '--distributed-executor-backend ray'.\n- multiprocessing, set '--nnodes' "
                "appropriately." % (local_world if args.nnodes > 1 else self.world, self.gpus)
            )
        self.mnbt = args.max_num_batched_tokens or 8192
        self.a(
            "INFO",
            "scheduler.py:205",
            "Chunked prefill is enabled with max_num_batched_tokens=%d." % self.mnbt,
        )
        if backend == "ray":
            self.a(
                "INFO",
                "config.py:2480",
                "Defaulting to use ray for distributed inference"
                if args.distributed_executor_backend is None
                else "Using ray for distributed inference",
            )
        self.sleep("startup", 0.5)
        self.e(
            "INFO",
            "core.py:93",
            (
                "Initializing a V1 LLM engine (v%s) with config: model='%s', speculative_config=None, tokenizer='%s', "
                "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=%s, "
                "dtype=torch.bfloat16, max_seq_len=%d, download_dir=None, load_format=%s, tensor_parallel_size=%d, "
                "pipeline_parallel_size=%d, data_parallel_size=1, disable_custom_all_reduce=False, quantization=fp8, "
                "enforce_eager=%s, kv_cache_dtype=%s, device_config=cuda, seed=%s, served_model_name=%s, "
                "enable_prefix_caching=True, chunked_prefill_enabled=True, reasoning_parser='%s'"
            )
            % (
                dialects.version(),
                self.model,
                self.model,
                args.trust_remote_code,
                mml,
                args.load_format,
                self.tp,
                self.pp,
                args.enforce_eager,
                args.kv_cache_dtype,
                args.seed or 0,
                self.served[0],
                args.reasoning_parser or "",
            ),
        )
        if backend == "ray":
            self.setup_ray()
        elif args.nnodes > 1:
            self.setup_mp_rank0()
        else:
            self.ranks = [
                self.mk_rank(r, "127.0.0.1", local=True, mp=True) for r in range(self.world)
            ]
            for rk in self.ranks:
                self.r(
                    rk,
                    "INFO",
                    "parallel_state.py:1208",
                    "world_size=%d rank=%d local_rank=%d distributed_init_method=tcp://127.0.0.1:%d backend=nccl"
                    % (self.world, rk["rank"], rk["rank"], 40000 + self.pid % 20000),
                )
        self.start_phases()
        return 0

    def config_error(self, msg):
        raw(
            'Traceback (most recent call last):\n  File "/usr/local/bin/vllm", line 10, in <module>\n    sys.exit(main())\n'
            '  File "%s/vllm/engine/arg_utils.py", line 1321, in create_engine_config\n    config = VllmConfig(\n'
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig\n  Value error, %s"
            % (PY, msg.replace("\n", "\n  ")),
            self.api,
        )
        raw("ValueError: %s" % msg, self.api)
        return 1

    def mk_rank(
        self, r, ip, local, mp=False, wpid=None, remote_ip=None, visible=True, node_host=None
    ):
        wpid = wpid or (self.pid + 300 + r)
        if mp:
            prefix = vllm_prefix(
                "Worker_TP%d" % r
                if self.pp == 1
                else "Worker_PP%d_TP%d" % (r // self.tp, r % self.tp),
                wpid,
            )
        else:
            prefix = self.eng + ray_prefix("RayWorkerWrapper", wpid, remote_ip)
        return {
            "rank": r,
            "ip": ip,
            "local": local,
            "pid": wpid,
            "prefix": prefix,
            "visible": visible,
            "host": node_host or hostname(),
        }

    # ---- phases common to all backends -----------------------------------------------
    def spans_nodes(self):
        return len({rk["ip"] for rk in self.ranks}) > 1 or self.args.nnodes > 1

    def start_phases(self):
        args = self.args
        # worker init: free memory check (GB10 unified memory: MemAvailable)
        self.strike("worker_init")
        free = env_float("SPARK_EMU_FREE_MEM_GIB", 119.5)
        if free < args.gpu_memory_utilization * P.GPU_TOTAL_GIB:
            self.fatal(
                [
                    (
                        "engine",
                        "ERROR",
                        "core.py:708",
                        "EngineCore failed to start.\n" + F.LOW_MEMORY_TB,
                    )
                ]
            )
        self.phase_dist_init()
        self.phase_nccl()
        self.phase_load()
        self.phase_engine_init()
        self.start_api()

    def phase_dist_init(self):
        self.strike("dist_init")
        self.sync("dist_init")
        self.sleep("dist_init")

    def nccl_lines(self, rk, force=False):
        if (
            not force
            and env_str("NCCL_DEBUG", "").upper() != "INFO"
            and env_str("NCCL_DEBUG", "").upper() != "TRACE"
        ):
            return []
        host = rk.get("host") or hostname()
        pre = "%s:%d:%d [0] NCCL INFO " % (host, rk["pid"], rk["pid"])
        iface = env_str("NCCL_SOCKET_IFNAME", "enp1s0f1np1").lstrip("=^").split(",")[0]
        # NCCL binds its bootstrap and OOB sockets to NCCL_SOCKET_IFNAME's own address (the
        # fabric's), whatever address vLLM or Ray use for the node.
        node_ipv4 = interface_ipv4s() if rk["local"] else rk.get("ipv4") or {}
        addr = node_ipv4.get(iface, rk["ip"])
        hca = env_str("NCCL_IB_HCA", "")
        from .gpu_tools import IB_DEVICES

        known = [d for d, _ in IB_DEVICES]
        wanted = (
            [h.split(":")[0] for h in hca.lstrip("=^").split(",") if h] if hca else ["rocep1s0f1"]
        )
        devs = [d for d in wanted if d in known]
        ib = (
            bool(devs)
            and env_str("NCCL_IB_DISABLE", "0") != "1"
            and env_str("SPARK_EMU_RDMA", "1") != "0"
        )
        # ncclCommInitRank: the CUDA driver first, then NCCL's environment and bootstrap, then
        # its version (NVIDIA/nccl src/init.cc; nccl_lib says which ranks print it, and how)
        version, cuda, git = self.nccl_of(rk)
        L = [
            "cudaDriverVersion 13000",
            "NCCL_SOCKET_IFNAME set by environment to %s" % iface,
            "Bootstrap: Using %s:%s<0>" % (iface, addr),
        ]
        bare = []  # before 2.22.3: rank 0 alone, printf'd without NCCL's prefix
        said = "NCCL version %s+cuda%s" % (nccl_lib.version_text(version), cuda)
        if version >= nccl_lib.EVERY_RANK_SINCE:
            L.append(said)
            if git and version >= nccl_lib.GIT_LINE_SINCE:
                L.append("NCCL git version %s" % git)
        elif rk["rank"] == 0:
            bare.append(said)
        if ib:
            L += [
                "NCCL_IB_HCA set to %s" % (hca or devs[0]),
                "NET/IB : Using [0]%s:1/RoCE [RO]; OOB %s:%s<0>" % (devs[0], iface, addr),
                "NET/IB : Made virtual device [0] name=%s speed=200000 ndevs=1" % devs[0],
                "Using network IB",
            ]
        else:
            L += [
                "NET/IB : No device found.",
                "NET/Socket : Using [0]%s:%s<0>" % (iface, addr),
                "Using network Socket",
            ]
        L.append(
            "ncclCommInitRank comm 0x%x rank %d nranks %d cudaDev 0 nvmlDev 0 busId f01000 commId 0x%s - Init START"
            % (0xAAAAD4B1C0 + rk["rank"], rk["rank"], self.world, self.ctx["actor"][:16])
        )
        if force:
            return bare + [pre + x for x in L]
        via = "NET/IB/GDRDMA" if ib else "NET/Socket/0"
        peer = (rk["rank"] + 1) % max(1, self.world)
        for ch in range(2):
            L.append("Channel %02d/0 : %d[0] -> %d[0] [send] via %s" % (ch, rk["rank"], peer, via))
            L.append(
                "Channel %02d/0 : %d[0] -> %d[0] [receive] via %s" % (ch, peer, rk["rank"], via)
            )
        L += [
            "Connected all rings, use ring PXN 0 GDR %d" % (1 if ib else 0),
            "ncclCommInitRank comm 0x%x rank %d nranks %d cudaDev 0 nvmlDev 0 busId f01000 commId 0x%s - Init COMPLETE"
            % (0xAAAAD4B1C0 + rk["rank"], rk["rank"], self.world, self.ctx["actor"][:16]),
        ]
        return bare + [pre + x for x in L]

    def nccl_of(self, rk):
        """(version, cuda, git) of the NCCL rank `rk` loads: this container's, or the one its
        node's `ray start` registered."""
        if not rk["local"] and rk.get("nccl"):
            version, cuda, git = rk["nccl"]
            return tuple(version), cuda, git
        return nccl_lib.identity()

    def phase_nccl(self):
        force = bool(self.fault and self.fault_name == "nccl_hang")
        where, template = dialects.current()["pynccl"]
        for rk in self.ranks:
            # vLLM >= 0.11 logs it once, from the group's first rank (dialects)
            if rk["visible"] and (dialects.current()["pynccl_every_rank"] or rk["rank"] == 0):
                version = nccl_lib.version_text(self.nccl_of(rk)[0])
                self.r(rk, "INFO", where, template.format(nccl=version))
        for rk in self.ranks:
            if rk["visible"]:
                lines = self.nccl_lines(rk, force)
                if lines:
                    raw("\n".join(lines), rk["prefix"])
        self.strike("nccl_init")
        self.sync("nccl_init")
        self.sleep("nccl_init")
        if self.spans_nodes():
            self.each(
                "WARNING",
                "custom_all_reduce.py:84",
                lambda rk: (
                    "CustomAllreduce is disabled because this process group spans across nodes."
                ),
            )
        self.each(
            "INFO",
            "parallel_state.py:1400",
            lambda rk: (
                "rank %d in world size %d is assigned as DP rank 0, PP rank %d, TP rank %d, EP rank %d"
                % (rk["rank"], self.world, rk["rank"] // self.tp, rk["rank"] % self.tp, rk["rank"])
            ),
        )

    def load_time(self, rk):
        return self.nominal("load_weights") * (1.0 + 0.0137 * rk["rank"]) + 0.37

    def phase_load(self):
        self.each(
            "INFO",
            "gpu_model_runner.py:2602",
            lambda rk: "Starting to load model %s..." % self.model,
        )
        self.each(
            "INFO",
            "cuda.py:366",
            lambda rk: (
                "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER']"
            ),
        )
        self.weights_readable()
        w = P.weights_gib(self.profile, self.tp, self.pp)
        if w > self.args.gpu_memory_utilization * P.GPU_TOTAL_GIB:
            self.sleep("load_weights", 0.8)
            self.engine_core_failed(
                '\n  File "$py/vllm/model_executor/model_loader/default_loader.py", line 269, in load_weights\n'
                "    loaded_weights = model.load_weights(self.get_all_weights(model_config, model))\n"
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total "
                "capacity of $total_gib GiB of which 0.81 GiB is free. Including non-PyTorch memory, this process "
                "has 116.95 GiB memory in use.",
            )
        if self.fault and self.fault.get("phase") == "load_weights":
            self.sleep("load_weights", 0.4)
            self.strike("load_weights")
        self.sync("load_weights")
        self.sleep("load_weights")
        self.loaded_lines(w)
        self.sleep("post_load")

    def engine_core_failed(self, traceback_tail):
        """EngineCore's own start-up failure: its traceback from the top, then `traceback_tail`."""
        self.fatal(
            [
                (
                    "engine",
                    "ERROR",
                    "core.py:708",
                    "EngineCore failed to start.\n" + F.ENGINE_CORE_TB_HEAD + traceback_tail,
                )
            ]
        )

    def weights_readable(self):
        """A shard missing (offline) or not its header's size in this container's cache ends the
        load as vLLM's does, a little into it."""
        found = model_files.problem(self.model)
        if found is None:
            return
        self.sleep("load_weights", 0.1)
        self.engine_core_failed(
            model_files.load_error(found),
        )

    def loaded_lines(self, gib):
        """Each rank's lines once its weights are in (as the dialect words them)."""
        for rk in self.ranks:
            if not rk["visible"]:
                continue
            log = lambda level, src, msg, rk=rk: self.r(rk, level, src, msg)  # noqa: E731
            self.say(log, "weights", seconds=self.load_time(rk))
            self.say(
                log,
                "model_loading",
                gib=gib,
                seconds=self.load_time(rk) + self.nominal("post_load"),
            )

    def phase_engine_init(self):
        args = self.args
        t_init = 0.0
        if not args.enforce_eager:
            self.each(
                "INFO",
                "backends.py:548",
                lambda rk: (
                    "Using cache directory: /root/.cache/vllm/torch_compile_cache/%s/rank_%d_0/backbone for vLLM's torch.compile"
                    % (self.ctx["actor"][:10], rk["rank"])
                ),
            )
            self.sync("compile")
            self.sleep("compile")
            self.each(
                "INFO",
                "monitor.py:34",
                lambda rk: "torch.compile takes %.2f s in total" % (self.nominal("compile") * 0.93),
            )
            t_init += self.nominal("compile")
        self.strike("profile")
        self.sync("profile")
        self.sleep("profile")
        kv_gib, kv_tokens = P.kv_cache(
            self.profile,
            args.gpu_memory_utilization,
            self.tp,
            self.pp,
            per_token_bytes=self.kv_per_token,
        )
        if kv_tokens <= 0:
            self.engine_core_failed(
                "\nValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                "when initializing the engine.",
            )
        self.each(
            "INFO", "gpu_worker.py:298", lambda rk: "Available KV cache memory: %.2f GiB" % kv_gib
        )
        for key in ("kv_cache", "max_concurrency"):
            self.say(
                self.e,
                key,
                tokens=kv_tokens,
                max_model_len=self.mml,
                concurrency=kv_tokens / float(self.mml),
            )
        if self.mml > kv_tokens:
            self.engine_core_failed(
                "\nValueError: The model's max seq len (%d) is larger than the maximum number of tokens that can "
                "be stored in KV cache (%d). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
                "when initializing the engine." % (self.mml, kv_tokens),
            )
        self.kv_tokens = kv_tokens
        t_init += self.nominal("profile")
        if not args.enforce_eager:
            self.sync("cuda_graphs")
            self.sleep("cuda_graphs")
            self.each(
                "INFO",
                "gpu_model_runner.py:3480",
                lambda rk: (
                    "Graph capturing finished in %d secs, took 0.62 GiB"
                    % round(self.nominal("cuda_graphs"))
                ),
            )
            t_init += self.nominal("cuda_graphs")
        self.say(self.e, "engine", seconds=t_init + 1.73)

    def start_api(self):
        from .api import Engine, make_server

        args = self.args
        mns = args.max_num_seqs or 256
        self.engine = Engine(
            self.profile,
            self.served,
            self.model,
            self.mml,
            mns,
            args.reasoning_parser,
            self.kv_tokens,
            self.api,
        )
        self.a(
            "INFO",
            "loggers.py:147",
            "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: %d"
            % (self.kv_tokens // P.KV_BLOCK),
        )
        self.sleep("api_start")
        self.a("INFO", "api_server.py:1634", "Supported_tasks: ['generate']")
        if args.reasoning_parser:
            self.a(
                "INFO",
                "serving_chat.py:139",
                "Using default chat sampling params from model: {'temperature': 0.6, 'top_k': 20, 'top_p': 0.95}",
            )
        host = args.host or "0.0.0.0"
        self.say(self.a, "api_server", host=host, port=args.port)
        self.a("INFO", "launcher.py:34", "Available routes are:")
        for route, meth in (
            ("/openapi.json", "GET, HEAD"),
            ("/docs", "GET, HEAD"),
            ("/health", "GET"),
            ("/load", "GET"),
            ("/ping", "POST"),
            ("/ping", "GET"),
            ("/tokenize", "POST"),
            ("/detokenize", "POST"),
            ("/v1/models", "GET"),
            ("/version", "GET"),
            ("/v1/chat/completions", "POST"),
            ("/v1/completions", "POST"),
            ("/metrics", "GET"),
        ):
            self.a("INFO", "launcher.py:42", "Route: %s, Methods: %s" % (route, meth))
        try:
            self.sock.close()  # the reserved port: handed over to the HTTP server
        except OSError:
            pass
        self.httpd = make_server(self.engine, host, args.port)
        out("%sINFO:     Started server process [%d]" % (self.api, self.pid))
        out("%sINFO:     Waiting for application startup." % self.api)
        threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        ).start()
        self.ready = True
        if not dialects.omitted("startup_complete"):
            out("%sINFO:     Application startup complete." % self.api)
        if not dialects.omitted("uvicorn_running"):
            out(
                "%sINFO:     Uvicorn running on http://%s:%d (Press CTRL+C to quit)"
                % (self.api, host, args.port)
            )
        self.notify_peers({"t": "ready"})
        if not args.disable_log_stats:
            threading.Thread(target=self.stats_loop, daemon=True).start()
        if self.fault and self.fault.get("phase") == "serving":
            after = env_float("SPARK_EMU_FAULT_AFTER_S", 5.0)
            threading.Timer(after, lambda: self.strike("serving")).start()
        while not self.stop_evt.is_set():
            self.stop_evt.wait(1.0)

    def stats_loop(self):
        iv = env_float("SPARK_EMU_STATS_INTERVAL_S", 10.0)
        while not self.dying:
            time.sleep(iv)
            if self.dying:
                return
            self.engine.stats_line()

    # ---- signals -----------------------------------------------------------------------
    def on_term(self, signum, frame):
        def go():
            with self.fatal_lock:
                if self.dying:
                    return
                self.dying = True
            if self.ready and not self.args.headless:
                self.shutdown_lines()
            self.notify_peers({"t": "shutdown"})
            self.remove_pg()
            die(0)

        threading.Thread(target=go, daemon=True).start()

    # ------------------------------------------------------------------------------------
    # Ray backend
    # ------------------------------------------------------------------------------------
    def setup_ray(self):
        from . import ray_cli as R

        addr = R.read_cluster_address()
        info = None
        if addr:
            try:
                info = R.gcs_call(addr, "/api/cluster", timeout=2.0)
            except (OSError, ValueError):
                info = None
        if info is None:
            self.engine_core_failed(
                '\n  File "$py/vllm/v1/executor/ray_utils.py", line 310, in initialize_ray_cluster\n'
                "    ray.init(address=ray_address)\n" + R.NO_CLUSTER,
            )
        self.gcs_addr = addr
        t = time.time()
        raw(
            "%s,%03d\tINFO worker.py:1832 -- Connecting to existing Ray cluster at address: %s..."
            % (time.strftime("%Y-%m-%d %H:%M:%S"), int(t * 1000) % 1000, addr),
            self.eng,
        )
        raw(
            "%s,%03d\tINFO worker.py:2003 -- Connected to Ray cluster. View the dashboard at http://%s:8265 "
            % (time.strftime("%Y-%m-%d %H:%M:%S"), int(t * 1000) % 1000, info["head_ip"]),
            self.eng,
        )
        cur_ip = self.host_ip or env_str("RAY_NODE_IP_ADDRESS", "") or info["head_ip"]
        self.e(
            "INFO",
            "ray_utils.py:345",
            "No current placement group found. Creating a new placement group.",
        )
        alive = [n for n in info["nodes"] if n["alive"]]
        if self.world > sum(n["gpus"] for n in alive):
            self.e(
                "WARNING",
                "ray_utils.py:356",
                "The number of required GPUs exceeds the total number of available GPUs in the placement group.",
            )
        specs = [{"GPU": 1.0, "node:%s" % cur_ip: 0.001}] + [
            {"GPU": 1.0} for _ in range(self.world - 1)
        ]
        self.pg_id = self.ctx["actor"][:18] + "01000000"
        start = time.monotonic()
        interval = 10.0
        next_report = interval
        alloc = None
        registered = False
        autoscaler_warned = False
        while True:
            try:
                info = R.gcs_call(addr, "/api/cluster", timeout=2.0)
            except (OSError, ValueError):
                info = {"nodes": [], "used": {}}
            alloc = self.place(info, cur_ip)
            if alloc:
                break
            if not registered:
                try:
                    R.gcs_call(
                        addr, "/api/pg", {"pg_id": self.pg_id, "bundles": specs, "alloc": {}}
                    )
                    registered = True
                except (OSError, ValueError):
                    pass
            else:
                try:
                    R.gcs_call(addr, "/api/pg_heartbeat", {"pg_id": self.pg_id})
                except (OSError, ValueError):
                    pass
            waited = (time.monotonic() - start) / max(self.scale, 1e-9)
            if (
                not autoscaler_warned
                and not any(n["ip"] == cur_ip for n in info["nodes"] if n["alive"])
                and waited > 5
            ):
                autoscaler_warned = True
                raw(
                    "\x1b[33m(autoscaler +%ds)\x1b[0m Error: No available node types can fulfill resource request "
                    "%s. Add suitable node types to this cluster to resolve this issue."
                    % (int(waited), specs[0]),
                    self.eng,
                )
            if waited >= RAY_PG_TIMEOUT:
                break
            if waited >= next_report:
                self.e(
                    "INFO",
                    "ray_utils.py:230",
                    (
                        "Waiting for creating a placement group of specs for %d seconds. specs=%s. Check `ray status` and "
                        "`ray list nodes` to see if you have enough resources, and make sure the IP addresses used by ray "
                        "cluster are the same as VLLM_HOST_IP environment variable specified in each node if you are "
                        "running on a multi-node."
                    )
                    % (int(next_report), specs),
                )
                interval *= 2
                next_report += interval
            time.sleep(0.05)
        if not alloc:
            self.remove_pg()
            self.engine_core_failed(
                '\n  File "$py/vllm/v1/executor/ray_distributed_executor.py", line 91, in _init_executor\n'
                "    initialize_ray_cluster(self.parallel_config)\n"
                '  File "$py/vllm/v1/executor/ray_utils.py", line 418, in initialize_ray_cluster\n'
                "    _wait_until_pg_ready(current_placement_group)\n"
                '  File "$py/vllm/v1/executor/ray_utils.py", line 244, in _wait_until_pg_ready\n'
                "    raise ValueError(\n"
                "ValueError: Cannot provide a placement group of placement_group_specs=%s within %d seconds. See "
                "`ray status` and `ray list nodes` to make sure the cluster has enough resources."
                % (specs, RAY_PG_TIMEOUT),
            )
        gpu_alloc = {}
        for nid, _ in alloc:
            gpu_alloc[nid] = gpu_alloc.get(nid, 0) + 1
        try:
            R.gcs_call(addr, "/api/pg", {"pg_id": self.pg_id, "bundles": specs, "alloc": gpu_alloc})
        except (OSError, ValueError):
            pass
        self.ray_nodes = {}
        for r, (nid, node) in enumerate(alloc):
            local = node["ip"] == cur_ip
            wpid = (
                (self.pid + 300 + r) if local else (int(node.get("pid", 4000)) % 30000 + 4009 + r)
            )
            rk = self.mk_rank(
                r,
                node["ip"],
                local=local,
                wpid=wpid,
                remote_ip=None if local else node["ip"],
                node_host=node.get("hostname") or ("spark-" + node["ip"].split(".")[-1]),
            )
            rk["node_id"] = nid
            rk["ipv4"] = node.get("ipv4")
            rk["nccl"] = node.get("nccl")
            self.ranks.append(rk)
            self.ray_nodes[nid] = node
        rem = self.remote_rank()
        self.ctx.update(
            {
                "wip": rem["ip"],
                "wpid": rem["pid"],
                "node_id": rem.get("node_id", self.ctx["node_id"]),
            }
        )
        self.e("INFO", "ray_distributed_executor.py:175", "use_ray_spmd_worker: True")
        self.e(
            "INFO",
            "ray_env.py:65",
            "Copying the following environment variables to workers: %s"
            % sorted(
                k
                for k in (
                    "VLLM_HOST_IP",
                    "NCCL_SOCKET_IFNAME",
                    "GLOO_SOCKET_IFNAME",
                    "NCCL_IB_HCA",
                    "NCCL_DEBUG",
                    "VLLM_USE_V1",
                    "VLLM_WORKER_MULTIPROC_METHOD",
                )
                if k in os.environ or k.startswith("VLLM_USE")
            ),
        )
        for rk in self.ranks:
            self.r(
                rk,
                "INFO",
                "parallel_state.py:1208",
                "world_size=%d rank=%d local_rank=0 distributed_init_method=tcp://%s:%d backend=nccl"
                % (self.world, rk["rank"], cur_ip, 40000 + self.pid % 20000),
            )
        threading.Thread(target=self.ray_monitor, daemon=True).start()

    def place(self, info, cur_ip):
        alive = [n for n in info["nodes"] if n["alive"]]
        used = info.get("used", {})
        free = {n["node_id"]: int(n["gpus"]) - int(used.get(n["node_id"], 0)) for n in alive}
        first = [n for n in alive if n["ip"] == cur_ip and free[n["node_id"]] >= 1]
        if not first:
            return None
        order = first[:1] + [n for n in alive if n["node_id"] != first[0]["node_id"]]
        res = []
        for n in order:
            while free[n["node_id"]] > 0 and len(res) < self.world:
                res.append((n["node_id"], n))
                free[n["node_id"]] -= 1
        return res if len(res) == self.world else None

    def remove_pg(self):
        if self.pg_id and self.gcs_addr:
            from . import ray_cli as R

            try:
                R.gcs_call(self.gcs_addr, "/api/pg_remove", {"pg_id": self.pg_id}, timeout=1.0)
            except (OSError, ValueError):
                pass

    def ray_monitor(self):
        from . import ray_cli as R

        last_ok = time.monotonic()
        while not self.dying:
            time.sleep(0.25)
            try:
                R.gcs_call(self.gcs_addr, "/api/pg_heartbeat", {"pg_id": self.pg_id}, timeout=1.0)
                info = R.gcs_call(self.gcs_addr, "/api/cluster", timeout=1.0)
                last_ok = time.monotonic()
            except (OSError, ValueError):
                if time.monotonic() - last_ok > R.heartbeat_timeout():
                    return self.remote_died("gcs")
                continue
            alive = {n["node_id"] for n in info["nodes"] if n["alive"]}
            for rk in self.ranks:
                if rk.get("node_id") not in alive:
                    self.ctx.update({"wip": rk["ip"], "wpid": rk["pid"], "node_id": rk["node_id"]})
                    return self.remote_died("node", rk)

    def remote_died(self, why, rk=None):
        rk = rk or self.remote_rank()
        if self.backend == "ray":
            self.ctx.update({"wip": rk["ip"], "wpid": rk["pid"]})
            lines = []
            if why == "fault":
                lines.append(
                    (
                        "remote",
                        None,
                        None,
                        "*** SIGBUS received at time=%d on cpu 7 ***" % int(time.time()),
                    )
                )
                lines.append(
                    ("remote", None, None, "PC: @     0xffff8c2a1f40  (unknown)  (unknown)")
                )
                lines.append(
                    (
                        "engine",
                        None,
                        None,
                        "\x1b[33m(raylet, ip=$wip)\x1b[0m A worker died or was killed while executing a task by an unexpected system error. To troubleshoot the problem, check the logs for the dead worker. Worker IP address: $wip Worker PID: $wpid Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is crashed unexpectedly due to SIGSEGV or other unexpected errors.",
                    )
                )
                tb = F.ACTOR_DIED_TB.replace(
                    "The actor is dead because its node has died. Node Id: $node_id\n\tthe actor's node was terminated unexpectedly: health check failed due to missing too many heartbeats",
                    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.",
                )
            else:
                lines.append(
                    (
                        "engine",
                        None,
                        None,
                        "\x1b[33m(raylet)\x1b[0m The node with node id: $node_id and address: $wip and node name: $wip has been marked dead because the detector has missed too many heartbeats from it. This can happen when a \t(1) raylet crashes unexpectedly (OOM, etc.) \n\t(2) raylet has lagging heartbeats due to slow network or busy workload.",
                    )
                )
                tb = F.ACTOR_DIED_TB
            lines.append(
                ("engine", "ERROR", "core.py:721", "EngineCore encountered a fatal error.\n" + tb)
            )
            return self.fatal(lines, dead=True)
        # mp
        if why == "fault":
            self.notify_peers({"t": "die"})
            time.sleep(0.3)
            return
        self.ctx.update({"wip": rk.get("ip", "?")})
        lines = [
            (
                "engine",
                "ERROR",
                "multiproc_executor.py:154",
                "Worker proc Worker_TP%d (node rank %d, $wip) died unexpectedly, shutting down executor."
                % (rk.get("rank", 1), rk.get("node_rank", 1)),
            ),
            (
                "engine",
                "ERROR",
                "core.py:721",
                "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
                '  File "$py/vllm/v1/executor/multiproc_executor.py", line 265, in get_response\n'
                "    raise RuntimeError(\nRuntimeError: Worker failed with error 'Connection to node rank %d ($wip) lost', "
                "please check the stack trace above for the root cause" % rk.get("node_rank", 1),
            ),
        ]
        return self.fatal(lines, dead=True)

    # ------------------------------------------------------------------------------------
    # multiprocessing multi-node backend (TCP store on --master-port)
    # ------------------------------------------------------------------------------------
    def peer_timeout(self):
        return env_float("SPARK_EMU_PEER_TIMEOUT_S", 10.0)

    def setup_mp_rank0(self):
        args = self.args
        per_node = max(1, self.world // args.nnodes)
        self.ranks = [
            self.mk_rank(r, self.host_ip or args.master_addr, local=True, mp=True)
            for r in range(per_node)
        ]
        for rk in self.ranks:
            self.r(
                rk,
                "INFO",
                "parallel_state.py:1208",
                "world_size=%d rank=%d local_rank=%d distributed_init_method=tcp://%s:%d backend=nccl"
                % (self.world, rk["rank"], rk["rank"], args.master_addr, args.master_port),
            )
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind(("", args.master_port))
        except OSError as exc:
            self.engine_core_failed(
                "\ntorch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                "network address. port: %d, useIpv6: false, code: -98, name: EADDRINUSE, message: %s"
                % (args.master_port, exc.strerror),
            )
        srv.listen(16)
        srv.settimeout(0.2)
        self.store = srv
        deadline = time.monotonic() + STORE_TIMEOUT * self.scale
        while len(self.peers) < args.nnodes - 1:
            if time.monotonic() > deadline:
                self.engine_core_failed(
                    '\n  File "$py/vllm/distributed/parallel_state.py", line 1003, in init_distributed_environment\n'
                    "    torch.distributed.init_process_group(\n"
                    '  File "$py/torch/distributed/rendezvous.py", line 189, in _create_c10d_store\n'
                    "    return TCPStore(\n"
                    "torch.distributed.DistStoreError: Timed out after %d seconds waiting for clients. %d/%d clients joined."
                    % (STORE_TIMEOUT + 1, len(self.peers) + 1, args.nnodes),
                )
            try:
                conn, addr = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                continue
            conn.settimeout(5.0)
            try:
                f = conn.makefile("rb")
                hello = json.loads(f.readline() or b"{}")
            except (OSError, ValueError):
                conn.close()
                continue
            if hello.get("t") != "hello":
                conn.close()
                continue
            peer = {
                "sock": conn,
                "file": f,
                "ip": hello.get("ip") or addr[0],
                "node_rank": hello.get("node_rank", 1),
                "rank": hello.get("node_rank", 1) * per_node,
                "done": set(),
                "lock": threading.Lock(),
                "last_rx": time.monotonic(),
            }
            self.peers.append(peer)
        self.ctx.update({"wip": self.peers[0]["ip"] if self.peers else ""})
        self.peer_cond = threading.Condition()
        for p in self.peers:
            p["sock"].settimeout(1.0)
            threading.Thread(target=self.peer_reader, args=(p,), daemon=True).start()
        threading.Thread(target=self.hb_sender, daemon=True).start()

    def send(self, peer, obj):
        try:
            with peer["lock"]:
                peer["sock"].sendall((json.dumps(obj) + "\n").encode())
            return True
        except OSError:
            return False

    def notify_peers(self, obj):
        for p in self.peers:
            self.send(p, obj)

    def hb_sender(self):
        while not self.dying:
            self.notify_peers({"t": "hb"})
            time.sleep(0.5)

    def peer_reader(self, p):
        while True:
            try:
                line = p["file"].readline()
                if not line:
                    break
                p["last_rx"] = time.monotonic()
                msg = json.loads(line)
                if msg.get("t") == "done":
                    with self.peer_cond:
                        p["done"].add(msg.get("p"))
                        self.peer_cond.notify_all()
            except TimeoutError:
                if time.monotonic() - p["last_rx"] > self.peer_timeout():
                    break
            except (OSError, ValueError):
                break
        if not self.dying:
            self.remote_died("peer", p)

    def sync(self, phase):
        """mp rank 0: start `phase` on every node, wait for all to finish it (after own work)."""
        if not self.peers:
            return
        self.notify_peers({"t": "phase", "p": phase})
        self._pending_phase = phase

    def wait_peers(self, phase):
        if not self.peers:
            return
        with self.peer_cond:
            while not all(phase in p["done"] for p in self.peers):
                if self.dying:
                    break
                self.peer_cond.wait(0.2)
        if self.dying:
            self.block_forever()

    # ---- headless worker node (mp) -------------------------------------------------------
    def run_headless(self):
        args = self.args
        per_node = max(1, self.world // max(1, args.nnodes))
        ip = self.host_ip or "127.0.0.1"
        self.ranks = [
            self.mk_rank(args.node_rank * per_node + i, ip, local=True, mp=True)
            for i in range(per_node)
        ]
        self.say(self.a, "version_line")
        self.a(
            "INFO",
            "serve.py:132",
            "Launching vLLM in headless mode: node rank %d of %d, %d local worker(s)"
            % (args.node_rank, args.nnodes, per_node),
        )
        self.mml = parse_len(args.max_model_len) or P.NATIVE_MAX_MODEL_LEN
        deadline = time.monotonic() + STORE_TIMEOUT * self.scale
        sock = None
        while sock is None:
            try:
                sock = socket.create_connection((args.master_addr, args.master_port), timeout=1.0)
            except OSError:
                if time.monotonic() > deadline:
                    raw(
                        'Traceback (most recent call last):\n  File "$py/torch/distributed/rendezvous.py", line 189, in '
                        "_create_c10d_store\n    return TCPStore(\ntorch.distributed.DistNetworkError: The client socket has "
                        "timed out after %d000ms while trying to connect to (%s, %d).".replace(
                            "$py", PY
                        )
                        % (STORE_TIMEOUT, args.master_addr, args.master_port),
                        self.ranks[0]["prefix"],
                    )
                    return 1
                time.sleep(0.2)
        sock.sendall(
            (json.dumps({"t": "hello", "node_rank": args.node_rank, "ip": ip}) + "\n").encode()
        )
        for rk in self.ranks:
            self.r(
                rk,
                "INFO",
                "parallel_state.py:1208",
                "world_size=%d rank=%d local_rank=%d distributed_init_method=tcp://%s:%d backend=nccl"
                % (
                    self.world,
                    rk["rank"],
                    rk["rank"] % per_node,
                    args.master_addr,
                    args.master_port,
                ),
            )
        self.peers = [{"sock": sock, "lock": threading.Lock(), "ip": args.master_addr}]
        threading.Thread(target=self.hb_sender, daemon=True).start()
        sock.settimeout(1.0)
        f = sock.makefile("rb")
        last_rx = time.monotonic()
        self.kv_tokens = 1
        while True:
            try:
                line = f.readline()
            except TimeoutError:
                if time.monotonic() - last_rx > self.peer_timeout():
                    line = b""
                else:
                    continue
            except OSError:
                line = b""
            if not line:
                self.dying = True
                rk = self.ranks[0]
                vlog(
                    "ERROR",
                    "multiproc_executor.py:520",
                    (
                        'WorkerProc hit an exception.\nTraceback (most recent call last):\n  File "%s/vllm/distributed/'
                        'device_communicators/shm_broadcast.py", line 469, in acquire_read\n    raise RuntimeError(\n'
                        "RuntimeError: Connection to the master node %s:%d (node rank 0) was lost"
                        % (PY, args.master_addr, args.master_port)
                    ),
                    rk["prefix"],
                )
                die(1)
            last_rx = time.monotonic()
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            t = msg.get("t")
            if t == "phase":
                self.headless_phase(msg["p"])
                self.send(self.peers[0], {"t": "done", "p": msg["p"]})
            elif t == "ready":
                self.ready = True
            elif t == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            elif t == "shutdown":
                self.dying = True
                vlog(
                    "INFO",
                    "multiproc_executor.py:545",
                    "Parent process exited, terminating worker",
                    self.ranks[0]["prefix"],
                )
                die(0)

    def headless_phase(self, phase):
        args = self.args
        if phase == "dist_init":
            self.strike("dist_init")
            self.sleep("dist_init")
        elif phase == "nccl_init":
            self.phase_nccl_headless()
        elif phase == "load_weights":
            self.each(
                "INFO",
                "gpu_model_runner.py:2602",
                lambda rk: "Starting to load model %s..." % self.model,
            )
            self.weights_readable()
            if self.fault and self.fault.get("phase") == "load_weights":
                self.sleep("load_weights", 0.4)
                os.kill(os.getpid(), signal.SIGKILL)
            self.sleep("load_weights")
            w = P.weights_gib(self.profile, self.tp, self.pp)
            self.loaded_lines(w)
            self.sleep("post_load")
        elif phase == "compile":
            self.sleep("compile")
            self.each(
                "INFO",
                "monitor.py:34",
                lambda rk: "torch.compile takes %.2f s in total" % (self.nominal("compile") * 0.93),
            )
        elif phase == "profile":
            self.strike("profile")
            self.sleep("profile")
            kv_gib, _ = P.kv_cache(
                self.profile,
                args.gpu_memory_utilization,
                self.tp,
                self.pp,
                per_token_bytes=self.kv_per_token,
            )
            self.each(
                "INFO",
                "gpu_worker.py:298",
                lambda rk: "Available KV cache memory: %.2f GiB" % kv_gib,
            )
        elif phase == "cuda_graphs":
            self.sleep("cuda_graphs")
            self.each(
                "INFO",
                "gpu_model_runner.py:3480",
                lambda rk: (
                    "Graph capturing finished in %d secs, took 0.62 GiB"
                    % round(self.nominal("cuda_graphs"))
                ),
            )

    def phase_nccl_headless(self):
        self.phase_nccl()


# rank 0 phases must wait for the headless ranks: wrap sync() into the sleeps.
def _wrap_sync():
    orig_sleep = Serve.sleep

    def sleep(self, phase, extra=1.0):
        orig_sleep(self, phase, extra)
        pending = getattr(self, "_pending_phase", None)
        if pending == phase and self.peers and not self.args.headless:
            self._pending_phase = None
            self.wait_peers(phase)

    Serve.sleep = sleep


_wrap_sync()


def main(argv):
    if argv and argv[0] in ("--version", "-v"):
        out(dialects.version())
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(
            "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n"
        )
        return 0 if argv else 2
    if argv[0] != "serve":
        sys.stderr.write(
            "usage: vllm [-h] [-v] {chat,complete,serve,bench,collect-env,run-batch} ...\n"
            "vllm: error: argument subparser: invalid choice: '%s' (choose from 'chat', 'complete', "
            "'serve', 'bench', 'collect-env', 'run-batch')\n" % argv[0]
        )
        return 2
    parser = build_parser()
    args = parser.parse_args(normalize_argv(argv[1:]))
    srv = Serve(args)
    signal.signal(signal.SIGTERM, srv.on_term)
    signal.signal(signal.SIGINT, srv.on_term)
    try:
        rc = srv.run()
    except KeyboardInterrupt:
        rc = 0
    sys.stdout.flush()
    die(rc or 0)
