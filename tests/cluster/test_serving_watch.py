"""The rules of watching a serving cluster, with doubles: hangs (token stall, canary), memory
(trend, warnings, OOM kills) and the probe after a death no signature explains (issue 12, 1-3)."""

from __future__ import annotations

import asyncio

import httpx

from bot.config import load_config
from cluster.bench.server_metrics import ServerCounters
from cluster.config import Secrets, WatchConfig
from cluster.diagnosis.failures import FABRIC_LINK_DOWN, SIGNATURES
from cluster.diagnosis.postmortem import Finding, ProbeReport, amend, needs_probe, probe
from cluster.errors import DockerUnavailable, FileUnreadable, NodeError
from cluster.events import Failed, Progress
from cluster.logs.container_stream import ClusterMonitor, ContainerExited, LogLine
from cluster.nodes import ClusterConnection, CommandResult
from cluster.progress.checkpoint_follower import LogFollower
from cluster.progress.checkpoints import SERVING
from cluster.progress.reporter import Reporter
from cluster.resources.memory import (
    GIB,
    KernelOomKill,
    MemoryLow,
    MemoryReading,
    MemoryTrend,
    MemoryWatch,
    parse_meminfo,
    parse_oom_kills,
)
from cluster.serving.liveness import CanarySchedule, ServingHung, ServingWatch, TokenStall
from testkit.lab_cluster import LAB_CONFIG, FakeNode

CONFIG = load_config(LAB_CONFIG).cluster
HEAD, WORKER = (n.name for n in CONFIG.nodes)


def counters(running: float, tokens: float, waiting: float = 0) -> ServerCounters:
    return ServerCounters(running=running, waiting=waiting, generation_tokens=tokens)


# --- hangs ----------------------------------------------------------------------------------------


def test_requests_running_while_tokens_stand_still_is_a_hang_only_after_the_stall_time():
    stall = TokenStall(stall_s=60)
    assert stall.observe(counters(1, 100), at=0) is None
    assert stall.observe(counters(1, 100), at=59) is None
    found = stall.observe(counters(1, 100), at=61)
    assert found is not None and "stayed at 100 for 61.0 s" in found and "1 request(s)" in found


def test_advancing_tokens_or_an_idle_server_is_no_hang():
    stall = TokenStall(stall_s=60)
    for t in range(0, 300, 20):  # a long generation: tokens advance at every reading
        assert stall.observe(counters(2, 100 + t), at=t) is None
    idle = TokenStall(stall_s=60)
    for t in range(0, 300, 20):  # nothing running: standing tokens mean nothing
        assert idle.observe(counters(0, 100), at=t) is None
    assert idle.observe(counters(1, 100), at=300) is None, "running starts the clock anew"
    assert idle.observe(counters(1, 100), at=361) is not None


def test_a_canary_is_due_after_the_interval_unless_busy_or_proven_by_traffic():
    schedule = CanarySchedule(interval=100, now=0)
    assert not schedule.due(counters(0, 10), at=50)
    assert schedule.due(counters(0, 10), at=100)
    assert not schedule.due(counters(1, 10), at=150), "busy with real traffic: no canary"
    assert not schedule.due(counters(0, 25), at=160), "tokens advanced: traffic proved it"
    assert schedule.due_in(160) == 100
    assert schedule.due(None, at=260), "no /metrics: due at the interval all the same"


METRICS = (
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{{model_name="qwen35"}} {running}\n'
    "# TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{{model_name="qwen35"}} 0.0\n'
    "# TYPE vllm:generation_tokens counter\n"
    'vllm:generation_tokens_total{{model_name="qwen35"}} {tokens}\n'
)


class FakeServer:
    """/metrics from figures the test sets; completions that answer, or never do."""

    def __init__(self, *, running: float = 0, tokens: float = 0, hang: bool = False):
        self.running, self.tokens, self.hang = running, tokens, hang
        self.completions = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(
                200, text=METRICS.format(running=self.running, tokens=self.tokens)
            )
        self.completions += 1
        if self.hang:
            await asyncio.Event().wait()
        chunk = '{"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":null}]}'
        done = (
            '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
            '"usage":{"prompt_tokens":5,"completion_tokens":1}}'
        )
        body = f"data: {chunk}\n\ndata: {done}\n\ndata: [DONE]\n\n"
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})


def liveness(server: FakeServer, clock=None, **settings: float) -> ServingWatch:
    client = httpx.AsyncClient(transport=httpx.MockTransport(server), base_url="http://api")
    values = {"canary_interval": 0.05, "canary_timeout": 0.3, "metrics_interval": 0.02}
    config = WatchConfig(**{**values, **settings})
    if clock is None:
        return ServingWatch(config, client, "qwen35", HEAD)
    return ServingWatch(config, client, "qwen35", HEAD, clock=clock)


async def test_a_canary_without_an_answer_is_serving_hung_with_its_timing_and_the_counters():
    server = FakeServer(hang=True, tokens=42)
    hung = await asyncio.wait_for(liveness(server).run(), 5)
    assert isinstance(hung, ServingHung) and hung.node == HEAD
    assert "no complete answer within 0.3 s" in hung.detail
    assert "vllm:generation_tokens_total=42" in hung.evidence and "canary sent" in hung.evidence


async def test_no_canary_while_real_requests_run_and_the_stall_rule_judges_them():
    server = FakeServer(running=3, tokens=7, hang=True)
    hung = await asyncio.wait_for(liveness(server, token_stall=0.2).run(), 5)
    assert server.completions == 0, "no canary is sent to a busy server"
    assert hung.detail.startswith("tokens stalled: 3 request(s) running"), hung.detail
    assert "stayed at 7" in hung.detail and "canary" not in hung.detail
    assert hung.evidence.startswith("found by the token-stall rule"), hung.evidence
    assert "vllm:num_requests_running=3" in hung.evidence


async def test_a_canary_that_answers_proves_the_server():
    server = FakeServer()
    now = [0.0]
    watch = liveness(server, clock=lambda: now[0], canary_interval=100)
    assert await watch.check() is None and server.completions == 0, "not due yet"
    now[0] = 100.0
    assert await watch.check() is None and server.completions == 1
    now[0] = 150.0
    assert await watch.check() is None and server.completions == 1, "proven: not due again yet"


# --- memory ---------------------------------------------------------------------------------------

MEMINFO = "MemTotal:       127535212 kB\nMemFree:         1000000 kB\nMemAvailable:    8388608 kB\n"


def reading(at: float, available_gib: float, oom: int | None = 0) -> MemoryReading:
    return MemoryReading(WORKER, at, 120 * GIB, int(available_gib * GIB), oom)


def test_meminfo_and_vmstat_are_parsed():
    total, available = parse_meminfo(MEMINFO)
    assert total == 127535212 * 1024 and available == 8 * GIB
    assert parse_oom_kills("pgfault 1\noom_kill 3\nx 2\n") == 3
    assert parse_oom_kills("pgfault 1\n") is None


def test_the_trend_says_when_memory_runs_out_at_this_rate():
    trend = MemoryTrend()
    for minute in range(5):  # 1 GiB a minute from 10 GiB
        trend.add(reading(minute * 60, 10 - minute))
    rate = trend.falling_bytes_per_s()
    assert rate is not None and abs(rate * 60 / GIB - 1.0) < 1e-9
    assert trend.seconds_left() == 6 * 60
    assert "out of memory in about 6 minutes" in trend.describe()
    steady = MemoryTrend()
    steady.add(reading(0, 10))
    steady.add(reading(60, 11))
    assert steady.seconds_left() is None and steady.describe() == "not falling"


def test_low_memory_is_warned_once_per_fall_and_an_oom_kill_is_reported():
    watch = MemoryWatch(low_gib=6)
    assert watch.observe(reading(0, 8)) is None
    low = watch.observe(reading(60, 5))
    assert isinstance(low, MemoryLow) and low.node == WORKER
    assert "5.0 of 120.0 GiB available" in low.message and "out of memory in about" in low.message
    assert watch.observe(reading(120, 4)) is None, "warned once"
    assert watch.observe(reading(180, 8)) is None  # recovered past 1.25 x the threshold
    assert isinstance(watch.observe(reading(240, 5)), MemoryLow), "a new fall is warned again"
    killed = watch.observe(reading(300, 5, oom=2))
    assert isinstance(killed, KernelOomKill) and killed.kills == 2
    assert watch.oom_kills_since_start(WORKER) == 2


# --- what the follower makes of it ----------------------------------------------------------------


class StreamingDocker:
    """A Docker engine double whose container printed `lines` and lives on."""

    def __init__(self, lines: list[str]):
        self.lines = lines

    async def follow_log(self, name: str, **options: object):
        for line in self.lines:
            yield f"2026-12-01T10:00:00.000000000Z {line}\n"
        await asyncio.Event().wait()

    async def events(self, container: str, actions: list[str]):
        await asyncio.Event().wait()
        yield {}


async def events_of(logs: dict[str, list[str]], *items: object) -> list[object]:
    """What the follower yields for `items`, every node's container having printed `logs`."""
    monitor = ClusterMonitor("vllm", Secrets({}), 10)
    for name, lines in logs.items():
        monitor.follow(FakeNode(name, {}, {}, StreamingDocker(lines)))
    seen = 0
    while seen < sum(map(len, logs.values())):  # the lines are read before the items
        item = await monitor.next(timeout=5)
        seen += isinstance(item, LogLine)
    for item in items:
        monitor.publish(item)  # type: ignore[arg-type]
    failures = LogFollower(CONFIG, monitor, Reporter()).failures(SERVING)
    out: list[object] = []
    try:
        async for event in failures:
            out.append(event)
    finally:
        await failures.aclose()
        await monitor.aclose()
    return out


async def test_a_hang_is_the_serving_hung_failure_with_every_nodes_last_lines():
    events = await events_of(
        {
            HEAD: ["Engine 000: Avg generation throughput: 0.0 tokens/s, Running: 1 reqs"],
            WORKER: ["(RayWorkerWrapper pid=9) still here"],
        },
        MemoryLow(WORKER, "memory low on spark-lab-1: 5.0 of 120.0 GiB available"),
        ServingHung(HEAD, "a canary completion got no answer", "canary sent 60.0 s before"),
    )
    warning, failed = events
    assert isinstance(warning, Progress) and warning.phase == "memory_low"
    assert isinstance(failed, Failed) and failed.signature == "serving_hung"
    assert failed.summary.startswith("serving hung: a canary completion")
    assert failed.evidence == "canary sent 60.0 s before"
    assert f"── {HEAD} ──" in failed.log_tail and f"── {WORKER} ──" in failed.log_tail
    assert "(RayWorkerWrapper pid=9) still here" in failed.log_tail


async def test_dockers_oom_kill_is_a_failure_with_cause_and_fix():
    [failed] = await events_of({WORKER: []}, ContainerExited(WORKER, 137, oom_killed=True))
    assert isinstance(failed, Failed) and failed.signature == "container_oom_killed"
    assert "gpu_memory_utilization" in failed.fix and "earlyoom" in failed.fix
    assert WORKER in failed.summary


# --- the probe after an unexplained death ---------------------------------------------------------


class FakeDocker:
    def __init__(self, up: bool, ray_output: str = ""):
        self.up, self.ray_output = up, ray_output

    async def version(self) -> dict:
        if not self.up:
            raise DockerUnavailable(WORKER, "the Docker engine does not answer", "start it")
        return {"Version": "28.0"}

    async def exec_output(self, name: str, argv: list[str], *, timeout: float) -> str:
        return self.ray_output


RAY_ONE_NODE = "Active:\n 1 node_abc\nPending:\n (no pending nodes)\nUsage:\n 0.0/1.0 GPU\n"


def fake_node(name: str, *, link: str, reach: bool, docker_up: bool = True) -> FakeNode:
    fabric_ip = CONFIG.node(name).fabric_ip
    files = {
        "/sys/class/net/enp1s0f1np1/operstate": f"{link}\n",
        "/proc/meminfo": MEMINFO,
        "/proc/vmstat": "oom_kill 0\n",
    }
    commands = {
        "ip": CommandResult(0, f"4: enp1s0f1np1    inet {fabric_ip}/24 brd x scope global\n", ""),
        "ping": CommandResult(
            0 if reach else 1, "", "" if reach else "1 packets transmitted, 0 received"
        ),
        "date": CommandResult(0, "1764590000.000000000\n", ""),
    }
    return FakeNode(name, files, commands, FakeDocker(docker_up, RAY_ONE_NODE))


async def test_the_probe_names_the_fabric_link_that_is_down():
    connection = ClusterConnection(CONFIG)
    connection.nodes = {
        HEAD: fake_node(HEAD, link="up", reach=False),
        WORKER: fake_node(WORKER, link="down", reach=False),
    }
    report = await probe(CONFIG, connection, memory=MemoryWatch(6))
    cause = report.cause()
    assert cause is not None and cause.failure is not None
    assert cause.failure.id == "fabric_link_down" and cause.node == WORKER
    text = "\n".join(report.lines())
    assert f"enp1s0f1np1 on {WORKER} is down" in text and f"enp1s0f1np1 on {HEAD} is up" in text
    assert f"{HEAD} gets no answer from {WORKER}" in text
    assert "ray status: 1 active node(s)" in text and "engine 28.0 answers" in text
    assert "8.0 of 121.6 GiB available" in text and "nodes 0.00 s apart" in text.replace("-", "")


async def test_an_unrecognised_death_takes_the_probes_cause_and_fix():
    failed = Reporter().failed(
        SERVING,
        f"the container on {WORKER} exited with code 1 during Serving: Failed in serving on "
        f"{WORKER} (unrecognised error)",
        cause="serving failed with no known failure signature.",
        fix="Check what that error names",
        node=WORKER,
        evidence="Some Ray subprocesses exited unexpectedly:",
        signature="unrecognised",
    )
    assert needs_probe(failed, SIGNATURES)
    link = Finding(
        "fabric link",
        WORKER,
        f"enp1s0f1np1 on {WORKER} is down",
        FABRIC_LINK_DOWN,
        {"interface": "enp1s0f1np1", "node": WORKER, "state": "down"},
    )
    amended = amend(failed, ProbeReport([Finding("docker", HEAD, "engine answers"), link]))
    assert amended.summary == (
        f"the container on {WORKER} exited with code 1 during Serving: "
        f"the fabric link enp1s0f1np1 on {WORKER} is down"
    )
    assert amended.signature == "fabric_link_down"
    assert "sudo ip link set enp1s0f1np1 up" in amended.fix
    assert "signature" not in amended.fix.lower(), "no advice to edit the bot's source"
    assert "fabric link: enp1s0f1np1 on" in amended.evidence
    assert amended.evidence.startswith("probed after the failure:\n  docker: engine answers\n"), (
        "the findings come first: a long evidence is cut at its end in a chat message"
    )
    assert amended.evidence.endswith(failed.evidence)


async def test_a_death_the_probe_cannot_explain_says_what_was_ruled_out():
    failed = Reporter().failed(
        SERVING, "vLLM engine died", cause="The engine died.", fix="Read", signature="engine_dead"
    )
    assert needs_probe(failed, SIGNATURES)
    amended = amend(failed, ProbeReport([Finding("fabric link", HEAD, "enp1s0f1np1 is up")]))
    assert amended.signature == "engine_dead" and amended.summary == "vLLM engine died"
    assert "nothing else was found wrong: fabric link: enp1s0f1np1 is up" in amended.cause
    cause_row = Reporter().failed(SERVING, "x", cause="c", fix="f", signature="cuda_oom")
    assert not needs_probe(cause_row, SIGNATURES), "a known cause needs no probe"


async def test_a_node_whose_engine_does_not_answer_is_found_by_the_probe():
    connection = ClusterConnection(CONFIG)
    connection.nodes = {
        HEAD: fake_node(HEAD, link="up", reach=True),
        WORKER: fake_node(WORKER, link="up", reach=True, docker_up=False),
    }
    report = await probe(CONFIG, connection)
    cause = report.cause()
    assert cause is not None and cause.failure is not None
    assert cause.failure.id == "node_engine_gone" and cause.node == WORKER


def test_node_errors_stay_node_errors():
    assert issubclass(FileUnreadable, NodeError)
