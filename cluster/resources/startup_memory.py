"""Will vLLM get its memory at start-up on every node: the page cache told apart from memory in use.

vLLM refuses to start a rank whose free memory at start-up is below gpu_memory_utilization x the
device's total: "Free memory on device ... on startup is less than desired GPU memory
utilization" (vllm/v1/worker/utils.py, `request_memory`; each rank checks its own device, so two
nodes whose free memory differs fail on the one below). On a GB10 the device's memory is the
node's, and CUDA's free figure leaves out the page cache the kernel would give back
(vllm-project/vllm#35313): the last model's files in the cache make the next load fail on a node
whose MemAvailable is ample. So the figure compared here is MemFree; the page cache, buffers and
reclaimable slab are what `drop-caches` would add to it; the rest is in use by something.
(SGLang words its own cross-rank check "The memory capacity is unbalanced", at 90 %:
python/sglang/srt/model_executor/model_runner.py; vLLM has no such line.)
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.resources.memory import GIB, MemoryBreakdown


@dataclass(frozen=True)
class StartupMemory:
    """One node's memory against what vLLM claims of it at start-up."""

    node: str
    memory: MemoryBreakdown
    gpu_memory_utilization: float
    device_gib: float  # what vLLM sees as the device's total (the node's memory_gib)

    @property
    def need(self) -> int:
        return int(self.gpu_memory_utilization * self.device_gib * GIB)

    @property
    def fits(self) -> bool:
        return self.memory.free >= self.need

    @property
    def cache_in_the_way(self) -> bool:
        """Short, and dropping the page cache would free enough."""
        return not self.fits and self.memory.free + self.memory.reclaimable >= self.need

    def utilization_that_fits(self) -> float:
        """The largest gpu_memory_utilization (to 0.01) the memory not in use would allow."""
        spare = (self.memory.free + self.memory.reclaimable) / GIB
        return max(0.0, int(spare / self.device_gib * 100) / 100)

    def describe(self) -> str:
        return (
            f"{self.node}: {self.memory.describe()}; vLLM claims {self.need / GIB:.1f} GiB free "
            f"at start-up ({self.gpu_memory_utilization:g} x {self.device_gib:g} GiB)"
        )


def balance(nodes: list[StartupMemory]) -> str:
    """How the nodes' free memory differs, in words ("" when by less than 1 GiB)."""
    most, least = max(nodes, key=lambda n: n.memory.free), min(nodes, key=lambda n: n.memory.free)
    gap = (most.memory.free - least.memory.free) / GIB
    if gap < 1:
        return ""
    return (
        f"{least.node} has {gap:.1f} GiB less free memory than {most.node} "
        f"({least.memory.free / GIB:.1f} against {most.memory.free / GIB:.1f} GiB); every rank "
        "must have what vLLM claims"
    )
