"""Against the peers: sparkrun (PyPI, a public launcher for DGX Spark clusters) beside spark-bot's
`up`, on the same lab and the same emulator profile, one after the other: when each reports Ready
(its API answering) from its start, and when and how each reports an injected NCCL error
(`SPARK_EMU_FAULT=nccl_error`: the emulator's `RuntimeError: NCCL error: unhandled system error`
in ncclCommInitRank).

sparkrun is run as a new user runs it: its own venv (Python 3.12, `pip install sparkrun==0.4.2`,
made here once and cached under /var/cache/spark-lab), a fresh home with a `config.yaml` for the
lab's SSH (user, key, known hosts), a recipe file for the lab's image, model and serve settings,
and `sparkrun run recipe.yaml --hosts HEAD,WORKER --offline` (the lab has no Hugging Face Hub: the
model's files are laid out in each node's cache first). Its output is stamped line by line as it
prints it. Afterwards `sparkrun stop --all --hosts ...` and a check of both Docker engines: no
sparkrun container may be left. Needs the lab (root):

    .venv/bin/python benchmarks/peers.py [--part ready|failure|both] [--runs N] [--python PY312]
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiodocker
import yaml

from benchmarks.harness import cluster_on, down, emit_json, table
from cluster.config import ClusterConfig, Secrets
from cluster.controller import Controller
from cluster.events import Failed, Ready

VERSION = "0.4.2"
PYTHON_312 = Path("/root/.pyenv/versions/3.12.1/bin/python3.12")  # sparkrun needs 3.12
CACHE = Path("/var/cache/spark-lab")
FAULT = "nccl_error"
FAULT_LINE = "NCCL error: unhandled system error"  # what the fault prints (lab/README.md)
PREFIX = "sparkrun_"  # every container sparkrun makes is named so
WITHIN_S = 240.0  # one sparkrun command, at most
READY_SAID = "Inference ready at"
# sparkrun's own words for a launch that did not come up
FAILURE_SAID = re.compile(r"\bFAILED rc=|^\s*Error:|\bERROR: |Failed to (?:launch|exec)")
# a line quoted from the server's log (vLLM's and Ray's process prefixes), not sparkrun's own
SERVER_LINE = re.compile(
    r"\((?:APIServer|EngineCore\w*|RayWorkerWrapper|Worker\w*) pid=|\(raylet\)|^\s*File \"|Traceback"
)
NAMES_NCCL = re.compile(r"\bNCCL\b(?!_)")
STEP = re.compile(r"^\s*(?:\[\d/\d\]|Step \d/\d:|Planning:|Waiting for server readiness)")
GIVES_FIX = re.compile(r"^\s*(?:Fix|Hint|Try|Suggestion)\b", re.IGNORECASE)


# --- sparkrun as a new user installs it ---------------------------------------------------------


def sparkrun_venv(python: Path = PYTHON_312, version: str = VERSION) -> Path:
    """The Python of a venv holding sparkrun==version, made once (pip from PyPI) and kept in
    the lab's cache; concurrent callers wait for the one making it."""
    if not python.is_file():
        raise SystemExit(
            f"sparkrun {version} needs Python 3.12, not found at {python}: "
            "install it (pyenv install 3.12.1) or pass --python"
        )
    venv = CACHE / f"sparkrun-{version}"
    made = venv / ".installed"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"sparkrun-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            subprocess.run(["rm", "-rf", str(venv)], check=True)
            subprocess.run([str(python), "-m", "venv", "--without-pip", str(venv)], check=True)
            # this interpreter's pip installs into it: no ensurepip; --no-compile: the
            # modules sparkrun imports are compiled on first use
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "--python",
                    str(venv / "bin" / "python"),
                    "install",
                    "--quiet",
                    "--no-compile",
                    "--disable-pip-version-check",
                    f"sparkrun=={version}",
                ],
                check=True,
            )
            made.write_text(version + "\n")
    return venv / "bin" / "python"


def user_config(config: ClusterConfig) -> dict[str, Any]:
    """sparkrun's ~/.config/sparkrun/config.yaml: how to reach the lab's nodes."""
    ssh = config.head.ssh
    assert ssh is not None, "the lab's nodes are reached over SSH"
    options = ["-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={ssh.known_hosts}"]
    settings: dict[str, Any] = {"user": ssh.user, "options": options}
    if ssh.key is not None:
        settings["key"] = str(ssh.key)
    return {"ssh": settings}


def recipe(config: ClusterConfig, env: dict[str, str]) -> dict[str, Any]:
    """A sparkrun recipe serving what spark-bot serves on the lab (image, model, parallelism,
    flags) with the same emulator environment."""
    serve, container = config.serve, config.container
    return {
        "recipe_version": "2",
        "model": serve.model,
        "runtime": "vllm-ray",
        "container": container.image,
        "defaults": {
            "tensor_parallel": serve.tensor_parallel_size,
            "port": serve.port,
            "gpu_memory_utilization": serve.gpu_memory_utilization,
            "max_model_len": serve.max_model_len,
            "served_model_name": serve.api_model_name,
        },
        "env": {**container.env, **env},
        # sparkrun's rootless defaults ask for memlock=-1 and nofile=65535, above this machine's
        # hard limits (docker run fails: "error setting rlimit type 8"); the lab's own limits
        "executor_config": {
            "ulimit": [f"{name}={soft}:{hard}" for name, (soft, hard) in container.ulimits.items()]
        },
    }


@dataclass
class Said:
    at: float  # seconds after the command started
    text: str

    @property
    def own(self) -> bool:
        """sparkrun's own words, not a line it quotes from the server's log."""
        return not SERVER_LINE.search(self.text)


@dataclass
class Run:
    code: int
    lines: list[Said]

    def first(self, pattern: re.Pattern[str] | str) -> Said | None:
        found = re.compile(re.escape(pattern)) if isinstance(pattern, str) else pattern
        return next((s for s in self.lines if s.own and found.search(s.text)), None)


class Sparkrun:
    """The sparkrun CLI with a home of its own (a new user's) for one lab cluster."""

    def __init__(self, python: Path, config: ClusterConfig, home: Path):
        self.python = python
        self.config = config
        self.home = home
        self.hosts = ",".join(n.ssh.host for n in config.nodes if n.ssh is not None)
        settings = home / ".config" / "sparkrun" / "config.yaml"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(yaml.safe_dump(user_config(config)))

    def environ(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",  # each line when printed, as on a terminal
            "NO_COLOR": "1",
            "COLUMNS": "200",
            "HF_HUB_OFFLINE": "1",  # the lab has no Hub
            "SPARKRUN_NO_TELEMETRY": "1",
        }

    def run(self, env: dict[str, str]) -> Run:
        path = self.home / "lab-recipe.yaml"
        path.write_text(yaml.safe_dump(recipe(self.config, env), sort_keys=False))
        return self.command(["run", str(path), "--hosts", self.hosts, "--offline"])

    def keep(self, run: Run, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{s.at:8.2f} {s.text}\n" for s in run.lines))

    def stop(self) -> Run:
        return self.command(["stop", "--all", "--hosts", self.hosts])

    def command(self, args: list[str]) -> Run:
        """Run `sparkrun ARGS`, each output line stamped when it arrives; whatever it leaves
        running in its process group is killed when it ends."""
        started = time.time()
        lines = []
        with subprocess.Popen(
            [str(self.python), "-m", "sparkrun", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.environ(),
            cwd=self.home,
            start_new_session=True,
        ) as process:
            assert process.stdout is not None
            timer = threading.Timer(WITHIN_S, process.kill)
            timer.start()
            try:
                for raw in process.stdout:
                    text = raw.decode(errors="replace").rstrip("\n")
                    lines.append(Said(time.time() - started, text))
                code = process.wait()
            finally:
                timer.cancel()
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return Run(code, lines)


# --- one launch by each ------------------------------------------------------------------------


@dataclass
class Told:
    who: str
    what: str  # "Ready" or "failure"
    reported_s: float | None  # from the launcher's start
    said: str  # what it told the operator
    cause: bool = False  # named the cause in its own words
    fix: bool = False  # said what to do
    raw_lines: int = 0  # server log lines it showed
    extra: dict[str, Any] = field(default_factory=dict)


def api_answers(config: ClusterConfig) -> bool:
    assert config.head.ssh is not None
    url = f"http://{config.head.ssh.host}:{config.serve.port}/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def judge_sparkrun(run: Run, what: str, answered: bool) -> Told:
    raw = sum(1 for s in run.lines if not s.own)
    # where its time goes: each step's start
    steps = {
        s.text.strip()[:60]: round(s.at, 2) for s in run.lines if s.own and STEP.search(s.text)
    }
    if what == "Ready":
        ready = run.first(READY_SAID)
        return Told(
            "sparkrun " + VERSION,
            what,
            ready.at if ready and answered else None,
            ready.text.strip() if ready else f"no '{READY_SAID}' (exit {run.code})",
            raw_lines=raw,
            extra={"exit": run.code, "api_answered": answered, "steps": steps},
        )
    failed = run.first(FAILURE_SAID)
    own = [s.text for s in run.lines if s.own and (failed is None or s.at >= failed.at)]
    return Told(
        "sparkrun " + VERSION,
        what,
        None if failed is None else failed.at,
        failed.text.strip()[:120] if failed else f"no failure reported (exit {run.code})",
        cause=any(NAMES_NCCL.search(text) for text in own),
        fix=any(GIVES_FIX.search(text) for text in own),
        raw_lines=raw,
        extra={
            "exit": run.code,
            "steps": steps,
            # the launch failed of the injected fault, not of something else on the way
            "fault_shown": any(FAULT_LINE in s.text for s in run.lines),
        },
    )


async def by_sparkrun(
    python: Path, config: ClusterConfig, env: dict[str, str], what: str, keep: Path | None
) -> Told:
    """One `sparkrun run`, then its stop; no sparkrun container may outlive it."""
    with tempfile.TemporaryDirectory(prefix="sparkrun-home-") as home:
        sparkrun = Sparkrun(python, config, Path(home))
        try:
            run = await asyncio.to_thread(sparkrun.run, env)
            if keep is not None:
                await asyncio.to_thread(
                    sparkrun.keep, run, keep / f"sparkrun-{what}-{time.time():.0f}.txt"
                )
            answered = what == "Ready" and await asyncio.to_thread(api_answers, config)
        finally:
            stopped = await asyncio.to_thread(sparkrun.stop)
            left = await leftovers(config)
            if left:
                await remove(config, left)
                raise SystemExit(
                    f"`sparkrun stop --all` (exit {stopped.code}) left {sorted(left)}: removed"
                )
    return judge_sparkrun(run, what, answered)


async def by_spark_bot(config: ClusterConfig, what: str) -> Told:
    started = time.time()
    outcome: tuple[float, Ready | Failed] | None = None
    async for event in Controller(config, Secrets({})).up():
        if isinstance(event, Ready | Failed) and outcome is None:
            outcome = (time.time() - started, event)
    if outcome is None:
        raise SystemExit("spark-bot up ended without Ready or Failed")
    at, event = outcome
    await down(config)
    if isinstance(event, Ready):
        said = f"Ready: {event.api_url}"
        return Told("spark-bot up", what, at if what == "Ready" else None, said)
    said = f"{event.title}: {event.cause} / {event.fix}"
    return Told(
        "spark-bot up",
        what,
        at if what == "failure" else None,
        said,
        cause=bool(event.cause) and event.signature is not None,
        fix=bool(event.fix),
        raw_lines=len(event.context) + 1,
        extra={"signature": event.signature},
    )


# --- the lab around them -----------------------------------------------------------------------


async def leftovers(config: ClusterConfig) -> dict[str, list[str]]:
    """sparkrun's containers still on any node: node name -> container names."""
    left: dict[str, list[str]] = {}
    for node in config.nodes:
        async with aiodocker.Docker(url=f"unix://{node.docker_socket}") as docker:
            for container in await docker.containers.list(all=True):
                names = [n.lstrip("/") for n in container._container.get("Names", [])]
                if any(n.startswith(PREFIX) for n in names):
                    left.setdefault(node.name, []).extend(names)
    return left


async def remove(config: ClusterConfig, left: dict[str, list[str]]) -> None:
    for node in config.nodes:
        async with aiodocker.Docker(url=f"unix://{node.docker_socket}") as docker:
            for name in left.get(node.name, []):
                await docker.containers.container(name).delete(force=True)


@contextmanager
def lab_as_found(config: ClusterConfig) -> Iterator[None]:
    """The served model's files in each node's Hugging Face cache (sparkrun checks them before
    it launches; the emulator and spark-bot's fit check read them); after, the model and what
    sparkrun keeps in the nodes' homes removed."""
    from lab.api import lab_info, put_model, remove_model

    for i in range(len(config.nodes)):
        put_model(i, config.serve.model)
    try:
        yield
    finally:
        for i, node in enumerate(lab_info().nodes[: len(config.nodes)]):
            remove_model(i, config.serve.model)
            for path in sparkrun_files(Path(node.hf_cache)):
                shutil.rmtree(path, ignore_errors=True)


def sparkrun_files(hf_cache: Path) -> list[Path]:
    """What sparkrun leaves in a node's home: its runtime cache (compile caches per model) and
    its model-artifact locks beside the Hugging Face cache."""
    return [hf_cache.parent / "sparkrun", hf_cache / ".sparkrun-model-artifacts"]


# --- the benchmark -----------------------------------------------------------------------------


async def run(
    python: Path, parts: list[str], runs: int, json_out: Path | None, keep: Path | None
) -> int:
    rows: list[list[Any]] = []
    ok = True
    for part in parts:
        what = "Ready" if part == "ready" else "failure"
        env = {"SPARK_EMU_FAULT": FAULT} if part == "failure" else {}
        for _ in range(runs):
            async with cluster_on("lab", 2, env=env) as config:
                load = os.getloadavg()[0]
                with lab_as_found(config):
                    theirs = await by_sparkrun(python, config, env, what, keep)
                    ours = await by_spark_bot(config, what)
            for told in (theirs, ours):
                how = "" if what == "Ready" else _how(told)
                rows.append([what, told.who, _s(told.reported_s), how, told.said[:90]])
            if theirs.reported_s and ours.reported_s:
                ratio = f"{theirs.reported_s / ours.reported_s:.1f}x"
                rows.append([what, "ratio sparkrun/spark-bot", ratio, "", ""])
            else:
                ok = False
            if what == "failure" and not (ours.cause and ours.fix and theirs.extra["fault_shown"]):
                ok = False
            emit_json(
                json_out,
                "peers",
                {
                    "what": what,
                    "load_1m": load,
                    "sparkrun": vars(theirs),
                    "spark_bot": vars(ours),
                },
            )
    print(table(["event", "launcher", "reported (s)", "how", "it said"], rows))
    print(
        f"seconds from each launcher's start; the lab's emulator profile (configs/lab.yaml); "
        f"injected fault SPARK_EMU_FAULT={FAULT}; load average {os.getloadavg()[0]:.2f}"
    )
    return 0 if ok else 1


def _how(told: Told) -> str:
    parts = [
        "cause" if told.cause else "no cause",
        "fix" if told.fix else "no fix",
        f"{told.raw_lines} raw log lines",
    ]
    return ", ".join(parts)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--part", choices=("ready", "failure", "both"), default="both")
    parser.add_argument("--runs", type=int, default=3, help="launches of each (default 3)")
    parser.add_argument("--quick", action="store_true", help="one launch of each, Ready only")
    parser.add_argument("--python", type=Path, default=PYTHON_312, help="a Python 3.12")
    parser.add_argument("--json", type=Path, default=None, help="append the figures here")
    parser.add_argument("--keep", type=Path, default=None, help="save sparkrun's output here")
    args = parser.parse_args(argv)
    parts = ["ready", "failure"] if args.part == "both" else [args.part]
    if args.quick:
        parts, args.runs = ["ready"], 1
    python = sparkrun_venv(args.python)
    return asyncio.run(run(python, parts, args.runs, args.json, args.keep))


if __name__ == "__main__":
    sys.exit(main())
