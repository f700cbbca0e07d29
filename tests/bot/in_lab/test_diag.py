"""`/spark diag` end to end: Bolt's real client on the Slack stand-in, the lab cluster behind,
a planted Hugging Face token in the containers' environment."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from cluster.config import Secrets
from cluster.controller import Controller
from testkit.lab_cluster import FAST, cluster_for
from testkit.planted_secrets import HF_TOKEN, planted_in
from testkit.slack_bot import (
    ALICE,
    CH,
    attachment_text,
    down,
    header,
    private_answer,
    settings,
    slack_bot,
)

pytestmark = [pytest.mark.lab, pytest.mark.timeout(180)]

EVERY_NODE = (
    "container.log",
    "docker-inspect.json",
    "image.txt",
    "ip-addr.txt",
    "ip-link.txt",
    "ibdev2netdev.txt",
    "nvidia-smi.txt",
    "meminfo.txt",
    "date.txt",
)


async def test_diag_uploads_every_nodes_files_to_the_jobs_thread_and_no_planted_secret(
    slack, lab, tmp_path
):
    base = cluster_for(lab, timeouts=FAST)
    cluster = base.model_copy(
        update={
            "container": base.container.model_copy(
                update={"secret_env": {"HF_TOKEN": "SPARK_TEST_HF_TOKEN"}}
            )
        }
    )
    secrets = Secrets({"HF_TOKEN": HF_TOKEN})  # what resolve_secrets makes of the environment
    await down(cluster)
    try:
        async with slack_bot(
            slack, cluster, settings(tmp_path), controllers=lambda c: Controller(c, secrets)
        ):
            await slack.send_slash_command(ALICE, CH, "up")
            ready = await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c) == "✅ Ready", 60
            )
            parent_ts = ready.params["thread_ts"]
            await slack.wait_until(
                lambda: "Ready" in attachment_text(slack.message(CH, parent_ts)), 10
            )

            await slack.send_slash_command(ALICE, CH, "diag")
            done = await slack.wait_for(
                lambda c: c.method == "files.completeUploadExternal" and c.ok, 60
            )
            told = await private_answer(slack, ALICE, timeout=10)
    finally:
        await down(cluster)

    assert done.params["thread_ts"] == parent_ts, "into the launch's thread"
    assert "Diagnostics bundle uploaded" in json.dumps(told)
    [bundle] = [f for f in slack.files().values() if f["name"].startswith("spark-diag-")]
    with tarfile.open(fileobj=io.BytesIO(bundle["content"]), mode="r:gz") as archive:
        members = archive.getmembers()
        texts = {m.name.split("/", 1)[1]: archive.extractfile(m).read().decode() for m in members}
    assert members[0].name.endswith("/SUMMARY.txt")
    for node in cluster.nodes:
        for file in EVERY_NODE:
            assert texts.get(f"nodes/{node.name}/{file}"), (node.name, file)
        assert node.fabric_ip in texts[f"nodes/{node.name}/ip-addr.txt"]
        assert "Up" in texts[f"nodes/{node.name}/ibdev2netdev.txt"]
        assert "HF_TOKEN=***" in texts[f"nodes/{node.name}/docker-inspect.json"]
        assert (
            f"{node.name}: fabric {node.fabric_ip} on enp1s0f1np1, link state UP"
            in (texts["SUMMARY.txt"])
        )
    head = cluster.head.name
    assert "Loading weights took" in texts[f"nodes/{head}/container.log"]
    assert "Active:" in texts[f"nodes/{head}/ray-status.txt"]
    assert "GET /version" in texts["vllm-version.txt"]
    assert '"kind":"ready"' in texts["events.jsonl"].replace(" ", "")
    assert "value hidden" in texts["config.json"]
    for name, text in texts.items():
        assert not planted_in(text), name
