"""What `fabric-test` found, as data: per pair of nodes the figure, the tool that measured it,
each lane (one per subnet both hold: a logical interface of the port each) and why a pair or a
lane could not be measured; held against the link's nominal speed, compared with the last run
of the same cluster (the bench history's Comparison)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cluster.bench.models import Comparison

Tool = Literal["ib_write_bw", "all_reduce_perf"]
TOOL_WORDS: dict[str, str] = {
    "ib_write_bw": "perftest's ib_write_bw (RDMA write, one per subnet, summed)",
    "all_reduce_perf": "nccl-tests' all_reduce_perf (bus bandwidth, two ranks)",
}


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FabricLane(_Model):
    subnet: str
    server_device: str
    client_device: str
    server_address: str
    gbps: float | None = None
    error: str | None = None


class FabricPair(_Model):
    server: str
    client: str
    tool: Tool | None = None
    gbps: float | None = Field(None, description="the pair's figure: the lanes' sum, Gb/s")
    lanes: list[FabricLane] = Field(default_factory=list)
    error: str | None = Field(None, description="why no figure: the pair's reason")
    trained_gbps: float | None = Field(
        None, description="the speed the link trained at: the least both ends' sysfs reads"
    )
    warnings: list[str] = Field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.server} ↔ {self.client}"


def pair_line(pair: FabricPair, nominal_gbps: float) -> str:
    """The pair's figure in words (plain text: each surface marks it up as it does)."""
    if pair.gbps is None or pair.tool is None:
        return f"{pair.name}: not measured: {pair.error}"
    trained = (
        f" (it trained at {pair.trained_gbps:g} Gb/s)"
        if pair.trained_gbps is not None and pair.trained_gbps != nominal_gbps
        else ""
    )
    return (
        f"{pair.name}: {pair.gbps:.2f} Gb/s with {TOOL_WORDS[pair.tool]}, "
        f"{pair.gbps / nominal_gbps * 100:.0f} % of the link's nominal {nominal_gbps:g} Gb/s"
        f"{trained}"
    )


def lane_line(lane: FabricLane) -> str:
    figure = f"{lane.gbps:.2f} Gb/s" if lane.gbps is not None else f"not measured: {lane.error}"
    return f"{lane.subnet}: {lane.client_device} → {lane.server_device} ({lane.server_address}): {figure}"


class FabricTestReport(_Model):
    at: datetime
    setup_key: str = Field(description="the cluster's nodes and their fabric addresses")
    nominal_gbps: float = Field(description="network.link_speed_mbps / 1000")
    seconds: int
    pairs: list[FabricPair]
    comparisons: list[Comparison] = Field(default_factory=list)
    duration_s: float = 0.0
    kind: Literal["fabric_test_report"] = "fabric_test_report"

    def line(self, pair: FabricPair) -> str:
        return pair_line(pair, self.nominal_gbps)

    @property
    def failed(self) -> list[FabricPair]:
        return [pair for pair in self.pairs if pair.gbps is None]
