"""The image against the GPU: CUDA's compatibility rules on torch's arch list and the GPU's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cluster.resources.gpu_arch import ASK, MARK, Answer, parse, verdict

GB10 = (12, 1)


def answer(archs: list[str], capability: tuple[int, int] | None = GB10) -> Answer:
    return Answer(torch="2.9.0", cuda="12.9", archs=archs, gpu="NVIDIA GB10", capability=capability)


@pytest.mark.parametrize(
    ("archs", "how"),
    [
        (["sm_90", "sm_121"], "sm_121 is built for exactly it"),
        (["sm_90", "sm_100", "sm_120", "compute_120"], "runs sm_120 code (same major, lower minor"),
        (["sm_80", "sm_90", "compute_90"], "runs through compute_90 PTX"),
        (["sm_120a", "compute_120"], "runs through compute_120 PTX"),
        (["sm_120f"], "runs sm_120f code"),
    ],
)
def test_an_image_whose_archs_cover_the_gpu_passes_saying_how(archs, how):
    found = verdict(answer(archs))
    assert found.runs is True, found
    assert how in found.evidence
    assert "the GPU (NVIDIA GB10) is sm_121" in found.evidence


@pytest.mark.parametrize(
    "archs",
    [
        ["sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"],  # a Hopper-era wheel
        ["sm_120a"],  # architecture-specific: 12.0 only
        ["sm_100", "compute_120a"],  # PTX with 12.0-only features
        ["sm_122", "compute_122"],  # newer than the GPU: neither machine code nor PTX runs
        [],  # a CPU-only torch
    ],
)
def test_an_image_without_the_gpus_arch_fails_naming_both(archs):
    found = verdict(answer(archs))
    assert found.runs is False, found
    assert found.gpu_arch == "sm_121"
    assert "none of them runs on it" in found.evidence
    assert all(arch in found.evidence for arch in archs)


def test_no_torch_or_no_gpu_is_not_checked():
    no_torch = verdict(Answer(torch_error="ModuleNotFoundError: No module named 'torch'"))
    assert no_torch.runs is None and "no torch" in no_torch.evidence
    no_gpu = verdict(answer(["sm_121"], capability=None).model_copy(update={"gpu_error": "x"}))
    assert no_gpu.runs is None and "no GPU seen" in no_gpu.evidence


def test_the_answer_is_read_past_torchs_warnings_and_a_missing_one_is_said():
    line = MARK + json.dumps({"torch": "2.9.0", "archs": ["sm_121"], "capability": [12, 1]})
    warning = "UserWarning: NVIDIA GB10 with CUDA capability sm_121 is not compatible"
    parsed = parse(f"{warning}\n{line}\n")
    assert isinstance(parsed, Answer) and parsed.capability == GB10
    assert "printed no answer" in str(parse("exec: python3: not found\n"))


def test_the_question_runs_where_there_is_no_torch_nor_gpu_tool():
    """ASK itself, in this Python (no torch here, no nvidia-smi on PATH): an answer, not a crash."""
    done = subprocess.run(
        [sys.executable, "-c", ASK],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/nonexistent"},
    )
    parsed = parse(done.stdout)
    assert isinstance(parsed, Answer), done
    assert parsed.torch is None and parsed.torch_error
    assert verdict(parsed).runs is None
