"""The one table of failures (cluster/diagnosis/failures.py): ids unique across it, every `{name}` a text
names filled, and no cause written inline elsewhere in cluster/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from cluster.diagnosis import failures
from cluster.diagnosis.failures import (
    RANK0_INIT,
    SIGNATURES,
    THROTTLE_FIXES,
    XID_FIXES,
    FailureSignature,
    KnownFailure,
    cluster_words,
)
from cluster.progress.checkpoints import BY_ID
from cluster.progress.reporter import Reporter

CLUSTER = Path(__file__).resolve().parents[3] / "cluster"
PLACEHOLDER = re.compile(r"\{(\w+)\}")

# The rows found without a log line (and the stall rows), each with the values its call site
# passes: a new row needs its call site's values here.
CALL_SITE_VALUES: dict[str, dict[str, str]] = {
    "nccl_init_hang": cluster_words(2, 2),
    "ranks_not_joined": {
        **cluster_words(2, 2),
        "phase": "weights",
        "idle": "5 min",
        **RANK0_INIT.search(
            "world_size=2 rank=0 local_rank=0 distributed_init_method=tcp://10.0.0.1:29501"
        ).groupdict(),
    },
    "stalled": {**cluster_words(2, 2), "phase": "weights", "idle": "5 min"},
    "unrecognised": {"where": "weights on spark-a", "first_error": "`OSError: boom` (line 3)"},
    "image_missing": {"image": "vllm:1", "missing": "spark-b"},
    "image_differs": {"image": "vllm:1", "listing": "spark-a: sha256:1; spark-b: sha256:2"},
    "image_not_on_head": {"image": "vllm:1", "head": "spark-a"},
    "image_not_built_for_gpu": {
        "image": "vllm:1",
        "node": "spark-a",
        "built_for": "sm_80, sm_90",
        "gpu_arch": "sm_100",
        "gpu": "NVIDIA B200",
        "capability": "10.0",
        "ptx": "10.0+PTX",
    },
    "image_still_differs": {"image": "vllm:1", "listing": "spark-a: sha256:1; spark-b: sha256:2"},
    "interfaces_unexpected": {"node": "spark-b", "problem": "no interface has 10.0.0.2"},
    "model_incomplete": {
        "model": "org/m",
        "nodes": "spark-b",
        "defects": "spark-b: shards 1/2 complete: m-2.safetensors missing",
        "source": "spark-a",
    },
    "model_not_cached": {
        "model": "org/m",
        "defects": "spark-a: not in the cache",
        "head": "spark-a",
        "cache": "/root/.cache/huggingface",
    },
    "model_cache_unseen": {"model": "org/m", "unseen": "no container mount holds /models/m"},
    "model_still_incomplete": {"model": "org/m", "nodes": "spark-b", "defects": "m-2 missing"},
    "rsync_failed": {
        "model": "org/m",
        "source": "spark-a",
        "node": "spark-b",
        "target": "root@10.0.0.2",
        "status": "255",
        "stderr": "Host key verification failed.",
    },
    "memory_short": {"short": "spark-a", "memory": "spark-a: MemAvailable 3.0 GiB", "need": "80"},
    "model_does_not_fit": {
        "model": "org/m",
        "node": "spark-a",
        "max_model_len": "131072",
        "need": "20.00",
        "budget": "11.13",
        "weights": "93.13",
        "remedy": "set serve.max_model_len to 72960 or less",
    },
    "stale_container": {"container": "vllm", "listing": "spark-a: running"},
    "launch_in_progress": {
        "cluster": "lab",
        "holder": "`spark-bot console` on ops (pid 4242), since 2026-12-04 09:00:00 UTC "
        "(renewed 3 s ago)",
        "stale": "30",
    },
    "foreign_container": {
        "container": "vllm",
        "node": "spark-b",
        "state": "running, not started by spark-bot",
    },
    "ss_failed": {"node": "spark-a", "status": "127", "stderr": ""},
    "port_taken": {"ports": "8000, 6379", "node": "spark-a"},
    "docker_refused": {"node": "spark-a", "message": "could not select device driver"},
    "launcher_failed": {
        "command": "./launch.sh -d",
        "status": "1",
        "node": "spark-a",
        "cwd": "/home/op/spark-vllm-docker",
        "container": "vllm_node",
    },
    "launcher_killed": {"command": "./launch.sh", "node": "spark-a", "container": "vllm_node"},
    "launcher_containers_missing": {
        "container": "vllm_node",
        "missing": "spark-b",
        "limit": "180",
        "status": "0",
    },
    "ray_incomplete": {"active_nodes": "1", "want_nodes": "2", "ray_gpus": "1", "want_gpus": "2"},
    "api_unexpected": {"checkpoint": "API healthy", "evidence": "GET /health -> 503"},
    "phase_timeout": {"phase": "weights", "checkpoint": "Weights loaded", "limit": "1800"},
    "stopped_on_request": {
        "checkpoint": "Weights loaded",
        "how": "the container on spark-a was sent SIGTERM",
    },
    "follow_lost": {"reason": "Docker event stream ended", "checkpoint": "Weights loaded"},
    "container_removed": {
        "reason": "container vllm no longer exists on spark-a",
        "checkpoint": "Serving",
    },
    "container_not_running": {
        "container": "vllm",
        "node": "spark-b",
        "state": "exited (exit code 1)",
    },
    "container_images_differ": {"listing": "spark-a: sha256:1; spark-b: sha256:2"},
    "ray_node_left": {"active_nodes": "1", "want_nodes": "2", "ray_gpus": "1", "want_gpus": "2"},
    "api_unhealthy": {"detail": "GET /health -> 503"},
    "api_not_answering": {"error": "ReadTimeout"},
    "wrong_model": {"served": "['other']", "model": "qwen"},
    "engine_not_answering": {"error": "ReadTimeout"},
    "api_down": {"detail": "GET /health -> 503"},
    "api_down_node_lost": {
        "detail": "GET /health -> 503",
        "node": "spark-b",
        "lost": "log stream broke: lost the connection to the Docker engine",
    },
    "cluster_not_up": {"container": "vllm", "node": "spark-a"},
    "engine_busy": {"busy": "the server is busy: vllm:num_requests_running=1, waiting=0"},
    **{
        row: {
            "short": "spark-b",
            "listing": "spark-b: 37.0 GiB free, 80.0 GiB page cache and reclaimable, ...",
            "command": "sudo -n /usr/local/sbin/drop-caches",
            "utilization": "0.3",
        }
        for row in ("memory_page_cache", "memory_page_cache_by_hand", "memory_in_use")
    },
    **{
        row: {
            "node": "spark-b",
            "waited": "120",
            "available": "20.0",
            "before": "119.5",
            "holders": "python3 (pid 4242, 98.0 GiB resident)",
            "holder": "python3",
        }
        for row in ("memory_held", "memory_not_returned")
    },
    "fabric_mtu_mismatch": {
        "listing": "spark-a enp1s0f1np1: up, MTU 9000; spark-b enp1s0f1np1: up, MTU 1500",
        "interface": "enp1s0f1np1",
        "lower": "spark-b",
    },
    "fabric_subnet_missing": {
        "node": "spark-b",
        "subnet": "192.168.101.0/24",
        "peer": "spark-a",
        "peer_netdev": "enP2p1s0f1np1",
        "peer_address": "192.168.101.10/24",
        "netdevs": "enp1s0f1np1, enP2p1s0f1np1",
    },
    "fabric_other_port": {
        "node": "spark-b",
        "subnet": "192.168.100.0/24",
        "peer": "spark-a",
        "peer_netdev": "enp1s0f1np1",
        "peer_address": "192.168.100.10/24",
        "netdevs": "enp1s0f0np0, enP2p1s0f0np0",
    },
    "fabric_test_failed": {
        "pairs": "spark-a ↔ spark-b",
        "reasons": "spark-a ↔ spark-b: 192.168.100.0/24: spark-b: Couldn't connect to "
        "192.168.100.10:18515",
    },
    "drop_caches_not_configured": {},
    "drop_caches_refused": {
        "command": "sudo -n /usr/local/sbin/drop-caches",
        "status": "1",
        "node": "spark-b",
        "stderr": "sudo: a password is required",
    },
    "serving_hung": {"detail": "a canary completion (4 tokens) got no complete answer in 60 s"},
    "container_oom_killed": {"node": "spark-b", "checkpoint": "Serving"},
    "kernel_oom_kill": {
        "kills": "1",
        "node": "spark-b",
        "memory": "0.4 of 121.6 GiB available",
    },
    "fabric_link_down": {"interface": "enp1s0f1np1", "node": "spark-b", "state": "down"},
    "fabric_unreachable": {"node": "spark-a", "peer": "spark-b", "address": "10.0.0.2"},
    "node_engine_gone": {"node": "spark-b", "problem": "the Docker engine does not answer"},
    "ray_nodes_missing": {"active_nodes": "1", "want_nodes": "2"},
    "node_rebooted": {"node": "spark-b", "uptime": "40 s"},
    "node_not_answering": {"node": "spark-b", "problem": "connection refused"},
    **{
        row: {
            "node": "spark-b",
            "code": "79",
            "mnemonic": "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
            "description": "GPU has fallen off the bus",
            "resolution": "RESTART_BM",
            "xid_fix": XID_FIXES["RESTART_BM"].format(node="spark-b"),
        }
        for row in ("gpu_xid", "gpu_application_xid")
    },
    "pcie_aer_error": {
        "node": "spark-b",
        "severity": "Uncorrectable (Fatal)",
        "device": "nvidia 000f:01:00.0",
    },
    "gpu_throttled": {
        "node": "spark-b",
        "clocks": "1100 of 3003 MHz",
        "reasons": "HW thermal slowdown",
        "kind": "heat",
        "kind_fix": THROTTLE_FIXES["thermal"].format(node="spark-b"),
    },
    "gpu_low_clocks": {"node": "spark-b", "clocks": "850 of 3003 MHz"},
}


def _rows_without_a_log_line() -> list[KnownFailure]:
    return list(failures.ROWS_WITHOUT_A_LOG_LINE)


def test_every_row_is_in_exactly_one_of_the_two_tables():
    """A row the module defines but neither table lists is never matched nor named; one in
    both is two rows."""
    defined = [v for v in vars(failures).values() if isinstance(v, KnownFailure)]
    listed = [*SIGNATURES, *failures.ROWS_WITHOUT_A_LOG_LINE]
    assert not [row.id for row in defined if not any(row is other for other in listed)]
    assert len({id(row) for row in listed}) == len(listed), "a row listed twice"
    assert all(type(row) is FailureSignature for row in SIGNATURES)
    assert all(type(row) is KnownFailure for row in failures.ROWS_WITHOUT_A_LOG_LINE)
    assert {
        row.id: row for row in failures.ROWS_WITHOUT_A_LOG_LINE
    } == failures.ROW_WITHOUT_A_LOG_LINE_BY_ID


def test_ids_are_unique_across_the_whole_table():
    ids = [row.id for row in (*SIGNATURES, *_rows_without_a_log_line())]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_every_row_without_a_log_line_says_where_it_comes_from():
    for row in _rows_without_a_log_line():
        assert row.source and row.title and row.cause and row.fix, row.id


@pytest.mark.parametrize("row", _rows_without_a_log_line(), ids=lambda row: row.id)
def test_a_row_rendered_with_its_call_sites_values_names_nothing_unfilled(row):
    rendered = " ".join(row.render(CALL_SITE_VALUES[row.id]))
    assert not PLACEHOLDER.search(rendered), rendered


def test_every_call_site_value_listed_is_a_row():
    assert set(CALL_SITE_VALUES) == {row.id for row in _rows_without_a_log_line()}


@pytest.mark.parametrize("sig", SIGNATURES, ids=lambda sig: sig.id)
def test_a_log_rows_names_are_its_patterns_groups_or_the_cluster_words(sig: FailureSignature):
    names = {name for text in (sig.title, sig.cause, sig.fix) for name in PLACEHOLDER.findall(text)}
    assert names <= set(sig.pattern.groupindex) | set(cluster_words()), sig.id


def test_report_known_makes_the_failure_from_the_row():
    failed = Reporter().known(
        BY_ID["image"], failures.IMAGE_MISSING, CALL_SITE_VALUES["image_missing"], node="spark-b"
    )
    assert failed.summary == failed.evidence == "image vllm:1 is not on spark-b"
    assert failed.cause == failures.IMAGE_MISSING.cause
    assert failed.fix.startswith("on each of spark-b: `docker pull vllm:1`")
    assert failed.remedy == "sync-image"
    assert (
        failed.signature == "image_missing"
        and failed.node == "spark-b"
        and failed.checkpoint == "image"
    )


def _literal_texts(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, str))
        for n in ast.walk(node)
    )


def test_no_module_but_the_table_writes_a_cause_or_fix_for_a_failure():
    # Reporter.failed's texts come from a row, a diagnosis or a node error; a wrapper taking a
    # `cause` parameter would let texts be written inline again, so none may exist.
    written = []
    for path in sorted(CLUSTER.rglob("*.py")):
        where = path.relative_to(CLUSTER)
        if where.as_posix() in ("diagnosis/failures.py", "progress/reporter.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "failed"
            ):
                written += [
                    f"{where}:{node.lineno} {kw.arg}="
                    for kw in node.keywords
                    if kw.arg in ("cause", "fix") and _literal_texts(kw.value)
                ]
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
                written += [
                    f"{where}:{node.lineno} {node.name}(cause)"
                    for a in arguments
                    if a.arg == "cause"
                ]
    assert not written
