"""The two failures a command fixes, and their commands (`sync-image`, `sync-model`), as the
handler, CLI and Slack tests script them: what each failure and its copy's events say, and what
the chat should show of them. One flow, two remedies: the tests run it over both."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cluster.diagnosis.failures import IMAGE_DIFFERS, MODEL_INCOMPLETE
from cluster.events import Event, Failed, Progress, Transfer
from cluster.progress.checkpoints import BY_ID, SYNC_IMAGE, SYNC_MODEL, Checkpoint
from cluster.progress.reporter import Reporter
from testkit.doubles import CLUSTER, Hold

IMAGE = CLUSTER.container.image
MODEL = CLUSTER.serve.model
HEAD, WORKER = (node.name for node in CLUSTER.nodes)
SHARD = "model-00002-of-00002.safetensors"


def image_differs() -> Failed:
    listing = "spark-lab-0: sha256:aaaa; spark-lab-1: sha256:bbbb"
    return Reporter().known(
        BY_ID["image"], IMAGE_DIFFERS, {"image": IMAGE, "listing": listing}, evidence=listing
    )


def model_incomplete() -> Failed:
    defects = f"{WORKER}: shards 1/2 complete: {SHARD} is 1.2 GiB of 4.0 GiB"
    return Reporter().known(
        BY_ID["model"],
        MODEL_INCOMPLETE,
        {"model": MODEL, "nodes": WORKER, "defects": defects, "source": HEAD},
        node=WORKER,
        evidence=defects,
    )


@dataclass(frozen=True)
class Remedy:
    command: str  # what the button runs: /spark <command>
    label: str  # the button's
    checkpoints: tuple[Checkpoint, ...]
    failure: Callable[[], Failed]  # the preflight failure it fixes
    failure_title: str
    failure_says: tuple[str, ...]  # in the failure's text
    question_says: str  # in the confirmation asked of `/spark <command>`
    job_title: str
    done_footer: str  # how the job's message ends
    progress: Progress  # a copy's progress, as the controller reports it
    progress_says: str  # what of it the job's message shows

    @property
    def operation(self) -> str:
        return self.command.replace("-", "_")

    def passes(self, hold: Hold | None = None) -> list[Event | Hold]:
        """The command's events: every step passed, the progress after the second (then
        `hold`, when given)."""
        reporter = Reporter()
        steps = [reporter.passed(c, f"{c.id} proven") for c in self.checkpoints]
        return [*steps[:2], self.progress, *([hold] if hold else []), *steps[2:]]


SYNC_IMAGE_REMEDY = Remedy(
    command="sync-image",
    label="Sync image",
    checkpoints=SYNC_IMAGE,
    failure=image_differs,
    failure_title="✘ Same image on every node failed",
    failure_says=("sync-image",),
    question_says=f"Copy `{IMAGE}` from `{HEAD}`",
    job_title=f"📦 Sync image `{IMAGE}` on `{CLUSTER.name}`",
    done_footer="✔ Same image on every node in",
    progress=Progress(
        elapsed_s=1.0,
        phase="sync-image",
        node=WORKER,
        message=f"{IMAGE} to {WORKER}: 1.0 GiB of ~4.0 GiB (25%), 100.0 MiB/s, about 31 s left",
        transfer=Transfer(bytes_done=1 << 30, bytes_total=4 << 30, rate_bps=100 << 20, eta_s=30.7),
    ),
    progress_says="about 31 s left",
)
SYNC_MODEL_REMEDY = Remedy(
    command="sync-model",
    label="Sync model",
    checkpoints=SYNC_MODEL,
    failure=model_incomplete,
    failure_title="✘ The model complete on every node failed",
    failure_says=(SHARD, "spark-bot sync-model --config F"),
    question_says=f"Copy `{MODEL}` from a node of `{CLUSTER.name}`",
    job_title=f"📦 Sync model `{MODEL}` on `{CLUSTER.name}`",
    done_footer="✔ The model complete on every node in",
    progress=Progress(
        elapsed_s=1.0,
        phase="sync-model",
        node=WORKER,
        message=f"{MODEL} to {WORKER}: 2.0 GiB of ~8.0 GiB (25%), 1.0 GiB/s, about 6 s left",
        transfer=Transfer(bytes_done=2 << 30, bytes_total=8 << 30, rate_bps=1 << 30, eta_s=6.0),
    ),
    progress_says="about 6 s left",
)
REMEDIES = [SYNC_IMAGE_REMEDY, SYNC_MODEL_REMEDY]
