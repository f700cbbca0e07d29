"""The image against the GPU: the CUDA architectures the image's torch was built for, and
the compute capability of the GPU it will run on, asked once per image ID before the load.

An image whose kernels were not built for the GPU loads for minutes before its first kernel
fails ("no kernel image is available for execution on the device"); torch only warns at start
("NVIDIA GB10 with CUDA capability sm_121 is not compatible with the current PyTorch
installation"). One throw-away container on the head, started as the launch starts its own
(`--gpus all`), runs ASK and prints one line; `verdict` reads it with CUDA's rules:

- `sm_XY` (machine code) runs on compute capability X.Z for Z >= Y: same major, same or
  higher minor (CUDA's binary compatibility), so sm_120 code runs on a GB10 (12.1);
- `sm_XYa` (architecture-specific features) runs only on X.Y itself; `sm_XYf` (family, CUDA
  12.9+) on X.Z for Z >= Y like plain sm;
- `compute_XY` (PTX) runs on every capability >= X.Y: the driver compiles it for the GPU at
  first use (JIT, slower start); `compute_XYa` only on X.Y.

Only torch's own kernels are read: vLLM's extensions (`vllm/_C.abi3.so`, FlashInfer's) carry
no list Python can read without `cuobjdump`, which runtime images lack. torch's list is what
an image's builder set with TORCH_CUDA_ARCH_LIST for vLLM's kernels too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, ValidationError

from cluster.config import ClusterConfig
from cluster.errors import NodeError
from cluster.nodes import NodeConnection
from cluster.operations.launch_lease import FOLDER as LEASE_FOLDER
from cluster.serving.containers import throwaway_body

MARK = "spark-bot-gpu-arch "  # the answer's line; torch's warnings may come before it
# Fixed code, no value of the config in it: torch's build and the GPU it sees, else the GPU
# from nvidia-smi (the one the NVIDIA runtime mounts), as one JSON line after MARK.
ASK = f"""
import json, subprocess
out = {{}}
try:
    import torch
except Exception as e:
    out["torch_error"] = f"{{type(e).__name__}}: {{e}}"
else:
    out["torch"] = str(torch.__version__)
    out["cuda"] = torch.version.cuda
    out["archs"] = list(torch.cuda.get_arch_list())
    try:
        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name(0)
            out["capability"] = list(torch.cuda.get_device_capability(0))
    except Exception as e:
        out["gpu_error"] = f"torch: {{type(e).__name__}}: {{e}}"
if "capability" not in out:
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )
        name, cap = smi.stdout.splitlines()[0].rsplit(",", 1)
        out["gpu"] = name.strip()
        out["capability"] = [int(n) for n in cap.strip().split(".")]
    except Exception as e:
        out["gpu_error"] = f"nvidia-smi: {{type(e).__name__}}: {{e}}"
print({MARK!r} + json.dumps(out), flush=True)
"""
ARGV = ["python3", "-c", ASK]

_ARCH = re.compile(r"(?P<kind>sm|compute)_(?P<major>\d+)(?P<minor>\d)(?P<variant>[af]?)")


class Answer(BaseModel):
    """What ASK printed."""

    model_config = ConfigDict(frozen=True)

    torch: str | None = None
    cuda: str | None = None
    archs: list[str] = []
    gpu: str | None = None
    capability: tuple[int, int] | None = None
    torch_error: str | None = None
    gpu_error: str | None = None


@dataclass(frozen=True)
class Verdict:
    """`runs` None: not checked (`evidence` says why)."""

    runs: bool | None
    evidence: str
    built_for: str = ""  # the image's archs, as torch lists them
    gpu_arch: str = ""  # the GPU's, as sm_XY
    gpu: str = ""  # its name
    capability: tuple[int, int] = (0, 0)

    def words(self) -> dict[str, str]:
        """What the failure's texts say of the image and the GPU."""
        major, minor = self.capability
        return {
            "built_for": self.built_for,
            "gpu_arch": self.gpu_arch,
            "gpu": self.gpu,
            "capability": f"{major}.{minor}",
            "ptx": f"{major}.0+PTX",
        }


def parse(output: str) -> Answer | str:
    """ASK's answer in a container's output; why not, in words."""
    line = next((ln for ln in reversed(output.splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        tail = " | ".join(output.strip().splitlines()[-3:])[:300]
        return f"the image printed no answer (python3 missing?): {tail or 'no output'}"
    try:
        return Answer.model_validate(json.loads(line[len(MARK) :]))
    except (ValueError, ValidationError) as error:
        return f"the image's answer is not what spark-bot asks for: {error}"


def _covers(arch: str, capability: tuple[int, int]) -> str | None:
    """How code built as `arch` runs on `capability`, None when it does not."""
    found = _ARCH.fullmatch(arch)
    if found is None:
        return None
    built = (int(found["major"]), int(found["minor"]))
    exact = built == capability
    if found["variant"] == "a":
        return f"{arch} is built for exactly it" if exact else None
    if found["kind"] == "compute":
        if built > capability:
            return None
        return f"runs through {arch} PTX, compiled for the GPU by the driver at first use (JIT)"
    if built[0] != capability[0] or built[1] > capability[1]:
        return None
    if exact:
        return f"{arch} is built for exactly it"
    return f"runs {arch} code (same major, lower minor: CUDA's binary compatibility)"


def verdict(answer: Answer) -> Verdict:
    if answer.torch is None:
        return Verdict(None, f"the image has no torch to ask ({answer.torch_error})")
    if answer.capability is None:
        return Verdict(None, f"no GPU seen in the container ({answer.gpu_error or 'no answer'})")
    major, minor = answer.capability
    gpu_arch = f"sm_{major}{minor}"
    built = ", ".join(answer.archs) or "no CUDA architecture (a CPU-only torch)"
    facts = f"image built for {built} (torch {answer.torch}, CUDA {answer.cuda or 'none'})"
    name = answer.gpu or "the GPU"
    gpu = f"the GPU ({name}) is {gpu_arch}"
    # machine code before PTX: the list's order says nothing, the best way to run does
    ways = [way for arch in answer.archs if (way := _covers(arch, answer.capability))]
    best = min(ways, key=lambda way: ("exactly" not in way, "PTX" in way), default=None)
    if best is None:
        found = f"{facts}; {gpu}: none of them runs on it"
        return Verdict(False, found, built, gpu_arch, name, answer.capability)
    return Verdict(True, f"{facts}; {gpu}: {best}", built, gpu_arch, name, answer.capability)


# The answers already had, by image ID and the environment the image was asked in (the launch's:
# it can change what torch sees). An image ID names its content, so its answer holds for as long
# as the head's GPU does. Kept by the controller (memory) and on the head (disk, for the next
# process), as JSON beside the launch lease.
AnswersByImage = dict[str, Answer]
CACHE_FOLDER = f"{LEASE_FOLDER}/gpu-arch"
# $1 the folder, $2 the file's name, $3 its JSON: written whole or not at all
_WRITE = 'mkdir -p "$1" && printf "%s\\n" "$3" >"$1/$2.partial" && mv -f "$1/$2.partial" "$1/$2"'
CHECK_CONTAINER_SUFFIX = "-gpu-check"


@dataclass(frozen=True)
class Asked:
    answer: Answer | str  # str: why there is no answer
    how: str  # "asked", or where the answer was kept


async def ask_image(
    config: ClusterConfig, head: NodeConnection, home: str, image_id: str, known: AnswersByImage
) -> Asked:
    """The image's answer: remembered, else from the head's cache, else asked in a throw-away
    container on the head (then kept in both)."""
    key = answer_key(config, image_id)
    if key in known:
        return Asked(known[key], "remembered from an earlier preflight")
    cached = f"{home}/{CACHE_FOLDER}/{key}.json"
    with contextlib.suppress(NodeError, ValueError, ValidationError):
        text = await head.read_file(cached, timeout=config.timeouts.preflight)
        known[key] = Answer.model_validate_json(text)
        return Asked(known[key], f"kept on {head.name} in ~/{CACHE_FOLDER}")
    status, output = await head.docker.run_to_end(
        throwaway_body(config, ARGV),
        config.container.name + CHECK_CONTAINER_SUFFIX,
        timeout=config.timeouts.preflight,
    )
    answer = parse(output)
    if isinstance(answer, str):
        return Asked(f"{answer} (exit {status})", "asked")
    if verdict(answer).runs is not None:  # what was not seen may be seen next time
        known[key] = answer
        await keep_on_node(head, cached, answer.model_dump_json(), config.timeouts.preflight)
    return Asked(answer, "asked")


async def keep_on_node(node: NodeConnection, path: str, text: str, timeout: float) -> None:
    """`text` into the file at `path` on `node`, whole or not at all (a cache: best effort)."""
    folder, name = path.rsplit("/", 1)
    with contextlib.suppress(NodeError):
        await node.run(["sh", "-c", _WRITE, "sh", folder, name, text], timeout=timeout)


def answer_key(config: ClusterConfig, image_id: str) -> str:
    """A file name: the image ID's digest and one of the environment it is asked in."""
    env = json.dumps(sorted(config.container.env.items())).encode()
    digest = image_id.removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{64}", digest):  # not Docker's form: named by its hash
        digest = hashlib.sha256(image_id.encode()).hexdigest()
    return f"{digest}-{hashlib.sha256(env).hexdigest()[:12]}"
