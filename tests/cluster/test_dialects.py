"""Log drift: `up` on the lab with each vLLM dialect of the emulator, and with lines it never sees.

A launch never fails only because a line was not seen: a later stage (a later line, or the API
answering) proves the checkpoint, reported with a warning and the lines around where it was due.
"""

from __future__ import annotations

import pytest

from cluster.config import ExtraSpelling, Knowledge
from cluster.events import CheckpointPassed, Failed, Ready
from cluster.progress.checkpoints import launch_plan
from lab.emulator.dialects import DIALECTS
from testkit.lab_cluster import collect, controller_for

pytestmark = pytest.mark.lab


def passed(events) -> dict[str, CheckpointPassed]:
    return {e.checkpoint: e for e in events if isinstance(e, CheckpointPassed)}


def assert_ready(events, config) -> Ready:
    failures = [e for e in events if isinstance(e, Failed)]
    assert not failures, failures[0].model_dump_json(indent=1)
    assert [e.checkpoint for e in events if isinstance(e, CheckpointPassed)] == [
        c.id for c in launch_plan(config)
    ]
    assert isinstance(events[-1], Ready)
    return events[-1]


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
@pytest.mark.parametrize("backend", ["ray", "mp"])
async def test_every_dialect_reaches_ready_with_every_line_seen(clean, dialect, backend):
    controller = controller_for(
        clean, env={"SPARK_EMU_VLLM_DIALECT": dialect}, serve={"backend": backend}
    )
    events = await collect(controller.up())
    ready = assert_ready(events, controller.config)
    assert ready.vllm_version == DIALECTS[dialect]["version"], "read from the server's GET /version"
    by_id = passed(events)
    assert not [e.warning for e in by_id.values() if e.warning and "not seen" in e.warning]
    assert by_id["weights"].evidence.count("\n") == 1, "one line per rank, of one spelling"
    [status] = await collect(controller.status())
    assert status.vllm_version == DIALECTS[dialect]["version"]


@pytest.mark.parametrize(
    ("dialect", "lines", "omitted"),
    [
        ("0.17", "weights,model_loading", "weights"),
        ("0.32", "weights", "weights"),
        ("0.17", "kv_cache", "kv_cache"),
        ("0.32", "engine", "engine"),
    ],
)
async def test_a_line_never_printed_is_a_warning_proven_by_the_next_stage(
    clean, dialect, lines, omitted
):
    controller = controller_for(
        clean, env={"SPARK_EMU_VLLM_DIALECT": dialect, "SPARK_EMU_OMIT_LINES": lines}
    )
    events = await collect(controller.up())
    assert_ready(events, controller.config)
    by_id = passed(events)
    warned = by_id[omitted]
    assert warned.warning and "not seen in the log" in warned.warning
    assert "proven by:" in warned.evidence
    assert warned.log_tail, "the lines around where it was expected"
    others = [
        e for cid, e in by_id.items() if cid != omitted and e.warning and "not seen" in e.warning
    ]
    assert not others


async def test_a_spelling_taught_in_the_knowledge_file_proves_its_checkpoint(clean):
    taught = Knowledge(
        checkpoints={
            "engine": [
                ExtraSpelling(
                    pattern=r"Graph capturing finished in (?P<seconds>\d+) secs", source="this test"
                )
            ]
        }
    )
    controller = controller_for(clean, env={"SPARK_EMU_OMIT_LINES": "engine"}, knowledge=taught)
    events = await collect(controller.up())
    assert_ready(events, controller.config)
    engine = passed(events)["engine"]
    assert not engine.warning and "Graph capturing finished" in engine.evidence


async def test_without_the_api_servers_line_the_health_answer_proves_it(clean):
    # Neither of the API server's lines ("Application startup complete.", "Uvicorn running on")
    # in the log: the silence runs into the stall limit, and the API answering 200 then proves
    # the server started.
    controller = controller_for(
        clean,
        env={"SPARK_EMU_OMIT_LINES": "startup_complete,uvicorn_running"},
        timeouts={"stall": 3},
    )
    events = await collect(controller.up())
    assert_ready(events, controller.config)
    warned = passed(events)["api_server"]
    assert "not seen in the log" in warned.warning and "GET /health -> 200" in warned.warning


async def test_a_real_failure_still_fails_however_the_lines_are_worded(clean):
    controller = controller_for(
        clean, env={"SPARK_EMU_VLLM_DIALECT": "0.32", "SPARK_EMU_FAULT": "nccl_error"}
    )
    events = await collect(controller.up())
    failed = events[-1]
    assert isinstance(failed, Failed) and failed.signature == "nccl_unhandled_system_error"
