"""`/spark up RECIPE` with the operator's own launcher, through Bolt's real client on the Slack
stand-in: the same checklist and a reply per checkpoint as spark-bot's own launch, then a `down`
whose question says it removes what the script started."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.config import ClusterConfig, Secrets
from cluster.controller import Controller
from cluster.progress.checkpoints import launch_plan
from testkit.lab_cluster import collect
from testkit.slack_bot import (
    ALICE,
    CH,
    attachment_text,
    block_text,
    checkpoint_header,
    containers_present,
    header,
    private_answer,
    private_answers,
    settings,
    slack_bot,
)
from tests.cluster.in_lab.test_launcher import (
    RECIPE,
    WAITS_AFTER_A_FAILED_RUN,
    script_cluster,
    self_stopping_cluster,
    with_launcher_script,
)

pytestmark = [pytest.mark.lab, pytest.mark.timeout(180)]


async def test_a_launcher_recipe_through_slack_same_checkpoints_then_down_says_what_it_removes(
    slack, lab, tmp_path
):
    """vLLM started detached by the script, its output in the container's log; the script
    exits 0 while vLLM loads (no failure)."""
    launched = script_cluster(lab, "-d")
    cluster = launched.model_copy(  # the config as the bot holds it: the recipe not yet chosen
        update={
            "recipe": None,
            "launcher": None,
            "container": launched.container.model_copy(update={"name": "vllm_lab"}),
        }
    )
    await collect(Controller(cluster, Secrets({})).down())
    plan = launch_plan(launched)
    try:
        async with slack_bot(slack, cluster, settings(tmp_path)):
            await slack.send_slash_command(ALICE, CH, f"up {RECIPE}")
            ready = await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c) == "✅ Ready", 90
            )
            parent_ts = ready.params["thread_ts"]
            await slack.wait_until(
                lambda: "Ready" in attachment_text(slack.message(CH, parent_ts)), 10
            )
            replies = [
                c for c in slack.calls("chat.postMessage") if c.params.get("thread_ts") == parent_ts
            ]
            assert [checkpoint_header(r) for r in replies] == [f"✔ {c.title}" for c in plan] + [
                "✅ Ready"
            ]
            parent = slack.message(CH, parent_ts)
            assert RECIPE in block_text(parent) + attachment_text(parent)
            titles = [checkpoint_header(r) for r in replies]
            launcher = replies[titles.index("✔ The operator's launcher runs on the head")]
            assert "launch-pair.sh" in block_text(launcher)
            containers = replies[titles.index("✔ Containers started")]
            assert "started by the launcher" in block_text(containers)
            assert "```" in block_text(containers), "the script's lines as its log tail"

            answered = len(private_answers(slack, ALICE))
            await slack.send_slash_command(ALICE, CH, "down")
            question = await private_answer(slack, ALICE, "Confirm", after=answered, timeout=10)
            asked = block_text(question)
            assert f"recipe `{RECIPE}`'s launcher" in asked and "`vllm_node` on every node" in asked
            assert "spark-bot did not start it" in asked
            await slack.click_button(ALICE, CH, question["ts"], "spark_confirm")
            await slack.wait_for(
                lambda c: c.method == "chat.update" and "Removed 2" in str(c.params), 30
            )
        assert await containers_present(launched) == []
    finally:
        await collect(Controller(cluster, Secrets({})).down())


def the_bots_cluster(launched: ClusterConfig) -> ClusterConfig:
    """The bot's config holding `launched`'s launcher recipe, running none of it yet (its own
    container under spark-bot's name)."""
    return launched.model_copy(
        update={
            "recipe": None,
            "launcher": None,
            "container": launched.container.model_copy(update={"name": "vllm_lab"}),
        }
    )


async def failure_in_slack(slack, launched: ClusterConfig, tmp_path) -> str:
    """`/spark up RECIPE` of `launched`'s launcher recipe through Slack: its failure's text."""
    cluster = the_bots_cluster(launched)
    await collect(Controller(cluster, Secrets({})).down())
    try:
        async with slack_bot(slack, cluster, settings(tmp_path)):
            await slack.send_slash_command(ALICE, CH, f"up {RECIPE}")
            failure = await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c).startswith("✘"), 90
            )
        return block_text(failure)
    finally:
        await collect(Controller(cluster, Secrets({})).down())


async def test_a_launcher_that_stops_its_own_containers_is_told_as_its_failure_in_slack(
    slack, lab, tmp_path
):
    launched = self_stopping_cluster(lab)
    text = await failure_in_slack(slack, launched, tmp_path)
    assert "exited with status 1" in text and "Error: NCCL did not finish its set-up" in text
    assert "on request" not in text and "stopped its own containers" in text


async def test_a_launcher_whose_docker_run_failed_is_told_at_once_in_slack(slack, lab, tmp_path):
    # issue 26, item 1, through Slack: the script's `docker run` refused, the thread says so with
    # Docker's reason and the fix, well before the containers' timeout
    base = script_cluster(lab)
    launched = with_launcher_script(
        base,
        Path(lab.head.home) / "spark-vllm-docker",
        "waits-after-a-failed-run.sh",
        WAITS_AFTER_A_FAILED_RUN.format(image=base.container.image),
    )
    text = await failure_in_slack(slack, launched, tmp_path)
    assert "unable to apply caps" in text and "--cap-add" in text, text
