"""Properties over bad input (hypothesis): whatever a chat or a config file holds, the parser and
the loader answer with a command or a clear error, never a crash; nothing unsafe passes."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.config import load_config
from cluster.errors import ConfigError
from cluster.redact import redact
from handlers.errors import CommandError
from handlers.messages import escape, unescape
from handlers.settings import CommandsConfig
from handlers.specs import SPECS, parse_command

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
CLUSTER = load_config(CONFIGS / "lab.yaml").cluster
COMMANDS = CommandsConfig.model_validate(
    {
        "overrides": {
            "max_model_len": {"min": 1024, "max": 32768},
            "gpu_memory_utilization": {"min": 0.5, "max": 0.95},
        },
        "presets": {"long": {"max_model_len": 32768}},
    }
)
SAFE = re.compile(r"^[A-Za-z0-9_ .=,:-]*$")  # what a parsed command's canonical text may hold

words = st.one_of(
    st.sampled_from([*SPECS, "long", "head", "worker", "spark-lab-1", "200", "0", "-1"]),
    st.builds(
        lambda k, v: f"{k}={v}",
        st.sampled_from(
            [
                "max_model_len",
                "gpu_memory_utilization",
                "concurrency",
                "max_tokens",
                "runs",
                "max_num_seqs",
                "x",
            ]
        ),
        st.one_of(
            st.integers(-(10**12), 10**12).map(str),
            st.floats(allow_nan=True).map(repr),
            st.text(max_size=12),
        ),
    ),
    st.text(max_size=20),
)
command_texts = st.one_of(st.text(max_size=200), st.lists(words, max_size=6).map(" ".join))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command_texts)
def test_any_chat_text_is_a_command_or_a_clear_error(text):
    try:
        command = parse_command(text, CLUSTER, COMMANDS)
    except CommandError as error:
        assert str(error) and "Traceback" not in str(error)
        return
    canonical = command.text()
    assert SAFE.match(canonical), canonical
    assert parse_command(canonical, CLUSTER, COMMANDS) == command, (
        "a confirmation runs what was asked"
    )


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300))
def test_escaped_text_cannot_break_out_or_mention(text):
    shown = escape(text)
    assert "<" not in shown and ">" not in shown
    assert re.sub(r"&(amp|lt|gt);", "", shown).count("&") == 0
    assert unescape(shown) == redact(text)


TOKENS = st.sampled_from(
    [
        "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
        "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80), TOKENS, st.text(max_size=80))
def test_a_token_anywhere_in_text_is_masked(before, token, after):
    assert token not in redact(f"{before} {token} {after}")


SEED = yaml.safe_load((CONFIGS / "lab.yaml").read_text())


def _leaves(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _leaves(value, (*path, index))
    else:
        yield path


LEAVES = list(_leaves(SEED))
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**9),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.lists(st.text(max_size=5), max_size=3),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LEAVES), values)
def test_a_config_with_any_value_anywhere_loads_or_says_what_is_wrong(leaf, value):
    data = yaml.safe_load((CONFIGS / "lab.yaml").read_text())
    node = data
    for key in leaf[:-1]:
        node = node[key]
    node[leaf[-1]] = value
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(yaml.safe_dump(data))
        try:
            config = load_config(path)
        except ConfigError as error:
            assert str(path) in str(error)
            return
    for node_config in config.cluster.nodes:  # what reaches remote commands stays in its alphabet
        assert re.match(r"^/[A-Za-z0-9._/-]+$", node_config.docker_socket)
