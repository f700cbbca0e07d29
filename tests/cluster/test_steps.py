"""The step runner: steps in order, nothing after the first failure, a node error as the failure
of the step that met it."""

from __future__ import annotations

from cluster.errors import NodeTimedOut
from cluster.events import Failed, Progress
from cluster.progress.checkpoints import BY_ID
from cluster.progress.reporter import Reporter
from cluster.progress.steps import Step, run_steps
from testkit.lab_cluster import collect


async def test_steps_run_in_order_and_stop_at_the_first_failure():
    reporter, ran = Reporter(), []

    def step(name: str, *, fail: bool = False, raises: bool = False) -> Step:
        async def run():
            ran.append(name)
            yield Progress(elapsed_s=0, phase=name, message=name)
            if raises:
                raise NodeTimedOut("spark-b", "`ss` did not finish within 1 s", "check spark-b")
            if fail:
                yield reporter.failed(BY_ID["memory"], "short", cause="c", fix="f")
            yield Progress(elapsed_s=0, phase=name, message=f"{name} again")

        return Step(BY_ID[name], run)

    events = await collect(
        run_steps([step("ssh"), step("memory", fail=True), step("api_port")], reporter)
    )
    assert ran == ["ssh", "memory"] and isinstance(events[-1], Failed)
    assert [e.message for e in events if isinstance(e, Progress)] == ["ssh", "ssh again", "memory"]

    ran.clear()
    events = await collect(
        run_steps([step("ssh"), step("api_port", raises=True), step("memory")], reporter)
    )
    assert ran == ["ssh", "api_port"]
    failed = events[-1]
    assert (
        isinstance(failed, Failed) and failed.checkpoint == "api_port" and failed.node == "spark-b"
    )
    assert failed.cause == NodeTimedOut.cause and failed.fix == "check spark-b"
