"""The controller's events: the seam every surface (CLI, Slack, console, tests) renders.

Each operation is an async iterator of these. They are plain data, serialisable to JSON lines.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from cluster.bench.models import BenchReport
from cluster.operations.fabric_report import FabricTestReport

Remedy = Literal[
    "sync-image", "sync-model", "drop-caches"
]  # the commands a failure may offer (each asks before it runs)


class _Event(BaseModel):
    model_config = ConfigDict(frozen=True)

    elapsed_s: float = Field(description="seconds since the operation started")

    def to_json(self) -> str:
        return self.model_dump_json()


class CheckpointPassed(_Event):
    kind: Literal["checkpoint"] = "checkpoint"
    checkpoint: str = Field(description="id from cluster.progress.checkpoints")
    title: str
    node: str | None = Field(None, description="None when the checkpoint spans the cluster")
    evidence: str = Field(description="the log line or API answer that proves it")
    log_tail: list[str] = Field(default_factory=list)
    warning: str | None = Field(None, description="passed, but with a finding worth reading")
    logged_at: datetime | None = Field(None, description="when the evidence line was logged")
    not_checked: str | None = Field(
        None,
        description="the check could not run, and why: neither passed nor failed (its evidence "
        "says what was seen)",
    )

    @property
    def state(self) -> Literal["passed", "not_checked"]:
        return "passed" if self.not_checked is None else "not_checked"


class Transfer(BaseModel):
    """A copy's figures at one moment (`sync-image`'s image stream, `sync-model`'s copy)."""

    model_config = ConfigDict(frozen=True)

    bytes_done: int
    bytes_total: int | None = Field(
        None, description="the expected size (the image's size: an estimate); None: unknown"
    )
    rate_bps: float | None = Field(None, description="bytes per second, recent; None: too early")
    eta_s: float | None = Field(None, description="seconds left at that rate; None: unknown")


class Progress(_Event):
    kind: Literal["progress"] = "progress"
    phase: str
    node: str | None = None
    message: str
    transfer: Transfer | None = None


class Failed(_Event):
    kind: Literal["failed"] = "failed"
    checkpoint: str = Field(description="the checkpoint that could not be reached")
    title: str
    node: str | None = None
    summary: str = Field(description="what failed, in one sentence")
    evidence: str = Field("", description="the line that shows it")
    context: list[str] = Field(default_factory=list, description="the lines just before it")
    cause: str
    fix: str
    signature: str | None = Field(
        None,
        description="the id of its row in cluster.diagnosis.failures; None for a node that could not be reached or driven",
    )
    log_tail: list[str] = Field(default_factory=list)
    remedy: Remedy | None = Field(
        None, description="the spark-bot command that fixes it (its row's), offered to the user"
    )


class CompletionSample(BaseModel):
    """One timed streamed completion: the sample `up` and `verify` end with."""

    model_config = ConfigDict(frozen=True)

    text: str
    reasoning: str = ""
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None
    ttft_s: float
    e2e_s: float
    decode_tps: float | None = Field(
        description="tokens per second after the first (vLLM's 1/TPOT)"
    )


class Ready(_Event):
    kind: Literal["ready"] = "ready"
    model: str
    api_url: str = Field(description="the API as seen from the head node")
    sample: CompletionSample | None = None
    vllm_version: str | None = Field(None, description="what the server's GET /version says")
    recipe: str | None = Field(None, description="the recipe launched, if one was")
    memory: str | None = Field(
        None, description="the fit check's estimate beside what vLLM logged (weights, KV cache)"
    )
    not_verified: list[str] = Field(
        default_factory=list,
        description="the checks that could not run on the way (`title: why`): ready without them",
    )


class ContainerState(BaseModel):
    model_config = ConfigDict(frozen=True)

    node: str
    container: str
    present: bool
    running: bool = False
    status: str = "absent"
    started_at: datetime | None = None
    image_id: str | None = None
    exit_code: int | None = None
    owner: str | None = (
        None  # the cluster spark-bot started it for (its label); None: not started by spark-bot
    )
    recipe: str | None = Field(None, description="the recipe it was started with (its label)")
    recipe_unknown: str | None = Field(
        None,
        description="why the recipe that started it is not known (a launcher's container whose "
        "runs on the head could not be read); None: known, or not asked",
    )


class NodeMemory(BaseModel):
    model_config = ConfigDict(frozen=True)

    node: str
    available_gib: float
    total_gib: float

    def describe(self) -> str:
        return f"{self.available_gib:.1f} of {self.total_gib:.1f} GiB available"


class StatusReport(_Event):
    kind: Literal["status"] = "status"
    containers: list[ContainerState]
    memory: list[NodeMemory] = Field(
        default_factory=list, description="per node that answered (/proc/meminfo)"
    )
    api_healthy: bool | None = Field(None, description="None when the API was not reachable to ask")
    api_detail: str = ""
    vllm_version: str | None = None


class LogTail(_Event):
    kind: Literal["logs"] = "logs"
    node: str
    container: str
    lines: list[str]


class Removed(_Event):
    kind: Literal["removed"] = "removed"
    node: str
    container: str
    removed: bool = Field(description="False when there was nothing to remove, or it failed")
    detail: str
    failed: bool = Field(
        False, description="it may be there still: the node was not reached, or the removal failed"
    )


class RecipeSummary(BaseModel):
    """One recipe: what it runs, on which nodes, and what it needs (the fit estimate)."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    model: str
    served_model_name: str | None = None
    nodes: list[str]
    tensor_parallel_size: int
    pipeline_parallel_size: int
    backend: str
    image: str
    needs: str = Field(description="the fit estimate in a line, or why there is none")
    fits: bool | None = Field(None, description="None: no estimate")
    running: bool = False
    default: bool = Field(False, description="the one `up` launches when none is named")
    sources: list[str] = Field(default_factory=list)


class RecipesReport(_Event):
    kind: Literal["recipes"] = "recipes"
    recipes: list[RecipeSummary]
    running: str | None = Field(None, description="the recipe of the head's running container")
    detail: str = Field("", description="what could not be asked (an unreachable node)")


class BenchResult(_Event):
    kind: Literal["bench"] = "bench"
    report: BenchReport


class FabricTestResult(_Event):
    """`fabric-test`'s figures for every pair of nodes (cluster/operations/fabric_test.py)."""

    kind: Literal["fabric_test"] = "fabric_test"
    report: FabricTestReport


class DiagnosticsCollected(_Event):
    """A diagnostics bundle written to `path` (cluster/operations/diag_bundle.py)."""

    kind: Literal["diag"] = "diag"
    path: str
    size: int = Field(description="bytes of the .tar.gz")
    summary: str = Field(description="SUMMARY.txt, the bundle's first file")
    files: list[str]
    problems: list[str] = Field(
        default_factory=list, description="what could not be collected, and why"
    )


Event = Annotated[
    CheckpointPassed
    | Progress
    | Failed
    | Ready
    | StatusReport
    | LogTail
    | Removed
    | BenchResult
    | FabricTestResult
    | RecipesReport
    | DiagnosticsCollected,
    Field(discriminator="kind"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(line: str) -> Event:
    return EVENT_ADAPTER.validate_json(line)
