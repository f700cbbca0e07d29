"""Where the GPU check's answers are kept (no lab): the head's cache file read before asking,
a broken one asked over, an answer that saw no GPU never kept, the write a fixed script."""

from __future__ import annotations

import json
from typing import Any

from bot.config import load_config
from cluster.nodes import CommandResult
from cluster.resources.gpu_arch import ARGV, CACHE_FOLDER, MARK, Answer, ask_image
from testkit.lab_cluster import LAB_CONFIG, FakeNode

CONFIG = load_config(LAB_CONFIG).cluster
IMAGE_ID = "sha256:" + "c" * 64
GB10_IMAGE = {"torch": "2.9.0", "cuda": "13.0", "archs": ["sm_121"], "capability": [12, 1]}


class CheckDocker:
    """Runs no container: answers the check's with `answer` and counts the runs."""

    def __init__(self, answer: dict[str, Any]):
        self.answer, self.bodies = answer, []

    async def run_to_end(self, body: dict[str, Any], name: str, *, timeout: float):
        self.bodies.append(body)
        return 0, "torch: a warning first\n" + MARK + json.dumps(self.answer) + "\n"


def head(files: dict[str, str], answer: dict[str, Any]) -> FakeNode:
    written = CommandResult(0, "", "")
    return FakeNode(CONFIG.nodes[0].name, files, {"sh": written}, CheckDocker(answer))


async def test_a_broken_cache_file_is_asked_over_and_rewritten_by_a_fixed_script():
    node = head({}, GB10_IMAGE)
    known: dict[str, Answer] = {}
    asked = await ask_image(CONFIG, node, "/root", IMAGE_ID, known)
    assert asked.how == "asked" and isinstance(asked.answer, Answer)
    assert (
        node.docker.bodies[0]["Cmd"] == ARGV
        and node.docker.bodies[0]["Image"] == CONFIG.container.image
    )
    [write] = node.ran
    folder, name, text = write[4:]
    assert (
        list(write[:2]) == ["sh", "-c"]
        and folder == f"/root/{CACHE_FOLDER}"
        and name.startswith("c" * 64)
    )
    assert Answer.model_validate_json(text) == asked.answer, "the JSON is a parameter, not code"

    node = head({f"{folder}/{name}": "{not json"}, GB10_IMAGE)
    again = await ask_image(CONFIG, node, "/root", IMAGE_ID, {})
    assert again.how == "asked" and len(node.docker.bodies) == 1

    node = head({f"{folder}/{name}": text}, GB10_IMAGE)
    kept = await ask_image(CONFIG, node, "/root", IMAGE_ID, {})
    assert kept.how.startswith("kept on") and node.docker.bodies == []


async def test_an_answer_that_saw_no_gpu_is_not_kept():
    node = head({}, {**GB10_IMAGE, "capability": None, "gpu_error": "nvidia-smi: not found"})
    known: dict[str, Answer] = {}
    await ask_image(CONFIG, node, "/root", IMAGE_ID, known)
    await ask_image(CONFIG, node, "/root", IMAGE_ID, known)
    assert len(node.docker.bodies) == 2 and known == {} and node.ran == []
