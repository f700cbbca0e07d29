"""What is masked (secrets by value and by shape) and what is shown as it is (the evidence)."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.config import Secrets
from cluster.redact import RedactingFilter, looks_secret, redact, secret_name

REPO = Path(__file__).resolve().parents[2]

SECRETS = [
    # Slack
    "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "xoxp-1234567890-1234567890123-1234567890123-0123456789abcdef0123456789abcdef",
    "xoxa-2-1234567890-1234567890123-AbCdEfGh",
    "xoxr-1234567890-AbCdEfGhIjKl",
    "xoxe.xoxp-1-Mi0yLTEyMzQ1Njc4OTAtMTIzNDU2Nzg5MDEyMy0",
    "xoxe-1-My0xLTEyMzQ1Njc4OTAtMTIzNDU2Nzg5MDEyMy0",
    "xapp-1-A0123456789-1234567890123-0123456789abcdef0123456789abcdef",
    "https://hooks.slack.com/services/T0SPARKS1/B0HOOK123/aBcDeFgHiJkLmNoPqRsTuVwX",
    # a command's and a button's response_url: whoever holds one can answer as the bot
    "https://hooks.slack.com/commands/T0SPARKS1/5123456789012/aBcDeFgHiJkLmNoPqRsTuVwX",
    "https://hooks.slack.com/actions/T0SPARKS1/5123456789012/aBcDeFgHiJkLmNoPqRsTuVwX",
    # Hugging Face, OpenAI-style, GitHub, AWS
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf6hIj9k",
    "sk-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zT3BlbkFJ",
    "sk-ant-api03-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
    "ghp_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3d",
    "gho_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3d",
    "ghs_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3d",
    "github_pat_11ABCDEFG0Ab3dEf6hIj9kLm_2nOp5qRs8tUv1wXy4zAb3dEf6hIj9kLm2nOp5qRs8tUv1wXy4",
    "AKIAIOSFODNN7EXAMPLE",
    "ASIAY34FZKBOKMUTVV7A",
    # no vendor prefix: long and random
    "u8Z3kQ9vR2mX7pL4tN6wB1yC5dF0gH8jK3sV9qE2",  # 40 letters and digits
    "Xq7/Lm3Pz9+Rk2Vb8Nw4Ty6Hc1Js5Gd0Fa7Ue3Wi",  # base64, an AWS secret access key's shape
    "Zk3_Lp8-Qm2Rv7Tw1Xy6Bn4Hc9Jd5Gf0Sa3Ue8Wi",  # base64url
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",  # a JWT
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
]

EVIDENCE = [
    # what the bot shows: model names, image and container ids, paths, log lines
    "Qwen/Qwen3.5-122B-A10B-FP8",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "9f86d081884c",
    "commit fcf1d003bf4f0100c9d0921ff3d70e1127ca1b71",
    "node 9ce77de74a7bd8c16ec9d57ddeb14ce1dfdd1b780270a833be613f0e is alive",
    "d3b07384-d9a0-4e5b-8c2f-1a2b3c4d5e6f",
    "Received request chatcmpl-3f1e2d4c5b6a79880f1e2d3c4b5a6978: prompt: 'hi'",
    "/root/.cache/huggingface/hub/models--Qwen--Qwen3.5-122B-A10B-FP8/snapshots/"
    "fcf1d003bf4f0100c9d0921ff3d70e1127ca1b71/config.json",
    "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/ray_distributed_executor.py",
    "/tmp/ray/session_2026-12-01_06-20-08_648826_1/logs/ray_process_exit.log",
    "Qwen3_5MoeForConditionalGeneration",
    "char_to_order_map=IBM855_RUSSIAN_CHAR_TO_ORDER",
    "(EngineCore_DP0 pid=29385) (RayWorkerWrapper pid=33295, ip=127.0.0.11) INFO 11-30 07:19:24 "
    "[default_loader.py:267] Loading weights took 30.37 seconds",
    "Detected IB_IF: rocep1s0f1; Detected ETH_IF: enp1s0f1np1; Detected Local IP: 192.168.200.12",
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True RAY_USE_MULTIPROCESSING_CPU_COUNT=1",
    "hf_overrides={} hf_token=None HF_HUB_ENABLE_HF_TRANSFER=1 --disk-usage task-queue-size",
    "nvcr.io/nvidia/vllm:25.09-py3 hellohal2064/vllm-qwen3.5-gb10",
    "up gpu_memory_utilization=0.9123456 max_model_len=32768",
    "<@U0ALICE> in <#C0SPARKOPS> at 1701234567.123456",
    "xoxb-… goes in SLACK_BOT_TOKEN, never in the config",
    "https://hooks.example.com/services/not-slack",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_a_secret_shape_is_masked_wherever_it_sits_in_a_line(secret):
    masked = redact(f"spark> up {secret} please")
    assert masked.startswith("spark> up ***") and masked.endswith("*** please")
    assert re.fullmatch(r"[*.]+", masked.removeprefix("spark> up ").removesuffix(" please")), masked
    assert looks_secret(secret)


@pytest.mark.parametrize("text", EVIDENCE)
def test_evidence_and_ordinary_text_are_shown_as_they_are(text):
    assert redact(text) == text
    assert not looks_secret(text)


@pytest.mark.parametrize(
    "log", sorted((REPO / "tests" / "data" / "logs").glob("*.log")), ids=lambda p: p.name
)
def test_recorded_vllm_logs_pass_through_unchanged(log):
    for line in log.read_text().splitlines():
        assert redact(line) == line


def test_known_values_are_masked_even_without_a_shape():
    assert redact("password is correct-horse, ok", ["correct-horse"]) == "password is ***, ok"
    assert redact("a 1 b", ["1"]) == "a 1 b", (
        "values shorter than 4 characters would mask ordinary text"
    )
    secrets = Secrets({"HF_TOKEN": "plainpassword", "OTHER": "x"})
    assert (
        secrets.redact("login plainpassword with hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567")
        == "login *** with ***"
    )


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_HUB_AUTH", True),
        ("WANDB_KEY", True),
        ("WANDB_API_KEY", True),
        ("SLACK_SIGNING_SECRET", True),
        ("DB_PASSWORD", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("HF_TOKEN", True),
        ("NCCL_SOCKET_IFNAME", False),
        ("PYTORCH_CUDA_ALLOC_CONF", False),
        ("VLLM_HOST_IP", False),
    ],
)
def test_secret_names(name, secret):
    assert secret_name(name) is secret


def test_the_logging_filter_masks_messages_arguments_and_tracebacks():
    token = "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter(["swordfish-1"]))
    logger = logging.getLogger("tests.redact")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("/spark %s failed: %s", f"up {token}", "swordfish-1 refused")
        try:
            raise RuntimeError(f"bad token {token}")
        except RuntimeError:
            logger.exception("job failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert token not in text and "swordfish-1" not in text
    assert "/spark up *** failed: *** refused" in text
    assert "RuntimeError: bad token ***" in text


def test_the_bot_logs_through_the_filter_with_the_environment_secrets_known():
    """As `spark-bot run` and `console` configure logging: a fresh interpreter, real stderr."""
    token = "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
    code = (
        "import logging, os\n"
        "from bot.logs import configure_logging\n"
        "configure_logging(os.environ)\n"
        "logging.getLogger('handlers.dispatch').warning('job failed: %s, %s', os.environ['TOKEN_IN_LOG'], "
        "'signed with ' + os.environ['SLACK_SIGNING_SECRET'])\n"
    )
    env = {**os.environ, "SLACK_SIGNING_SECRET": "plain-words-secret", "TOKEN_IN_LOG": token}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert "WARNING handlers.dispatch: job failed: ***, signed with ***" in result.stderr, (
        result.stderr
    )
