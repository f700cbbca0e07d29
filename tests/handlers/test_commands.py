"""The /spark parser and authorization: what is accepted, what is refused and why."""

from __future__ import annotations

import pytest

from cluster.errors import SparkBotError
from handlers import commands as c
from handlers.access import Access
from handlers.errors import Busy, ChatError, CommandError
from handlers.settings import AccessConfig, AccessLevel, CommandsConfig
from handlers.specs import parse_command
from testkit.doubles import CLUSTER

COMMANDS = CommandsConfig.model_validate(
    {
        "overrides": {
            "max_model_len": {"min": 1024, "max": 65536},
            "gpu_memory_utilization": {"min": 0.5, "max": 0.95},
        },
        "presets": {"long": {"max_model_len": 65536}},
    }
)


def parse(text: str) -> c.Command:
    return parse_command(text, CLUSTER, COMMANDS)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", c.Help()),
        ("help", c.Help()),
        ("up", c.Up()),
        ("up max_model_len=8192", c.Up(overrides={"max_model_len": 8192})),
        (
            "up long gpu_memory_utilization=0.8",
            c.Up(preset="long", overrides={"gpu_memory_utilization": 0.8}),
        ),
        ("verify", c.Verify()),
        ("status", c.Status()),
        ("down", c.Down()),
        ("cancel", c.Cancel()),
        ("logs", c.Logs(node="spark-lab-0", lines=50)),
        ("logs worker", c.Logs(node="spark-lab-1", lines=50)),
        ("logs head 200", c.Logs(node="spark-lab-0", lines=200)),
        ("logs spark-lab-1 10", c.Logs(node="spark-lab-1", lines=10)),
        ("logs 20", c.Logs(node="spark-lab-0", lines=20)),
        ("bench", c.Bench()),
        (
            "bench concurrency=1,2,4 max_tokens=64 runs=2",
            c.Bench(concurrency=[1, 2, 4], max_tokens=64, runs=2),
        ),
        ("fabric-test", c.FabricTest()),
        ("fabric-test seconds=20", c.FabricTest(seconds=20)),
    ],
)
def test_valid_commands(text, expected):
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("launch", "unknown command `launch`"),
        ("up tensor_parallel_size=1", "`tensor_parallel_size` cannot be overridden"),
        ("up max_model_len=999999", "outside 1024..65536"),
        ("up max_model_len=abc", "is not a whole number"),
        ("up max_model_len=8192 max_model_len=4096", "given twice"),
        (
            "up huge",
            "`huge` is neither a recipe (`gpt-oss-120b-head`, `minimax-m2.5-awq`, "
            "`qwen35-122b-fp8`) nor a preset (`long`)",
        ),
        ("up; rm -rf /", "only letters, digits"),
        ("logs head $(id)", "only letters, digits"),
        ("logs `id`", "only letters, digits"),
        ("logs spark-lab-9", "unknown node `spark-lab-9`"),
        ("logs head 0", "LINES must be 1..500"),
        ("logs head 10 extra", "unexpected `extra`"),
        ("status now", "takes no arguments"),
        ("bench concurrency=0", "each concurrency level must be"),
        ("bench concurrency=2,2", "appears twice"),
        ("bench runs=50", "runs"),
        ("bench speed=9", "unknown option `speed`"),
        ("fabric-test seconds=0", "greater than or equal to 1"),
        ("fabric-test seconds=61", "less than or equal to 60"),
        ("fabric-test size=1G", "unknown option `size` (seconds)"),
        ("fabric-test seconds=5s", "is not a whole number"),
    ],
)
def test_invalid_commands_say_why(text, why):
    with pytest.raises(CommandError) as error:
        parse(text)
    assert why in str(error.value)


def test_a_bad_command_is_one_of_the_errors_spark_bot_raises_on_purpose():
    with pytest.raises(SparkBotError, match="unknown command `launch`"):
        parse("launch")
    assert issubclass(Busy, SparkBotError) and issubclass(ChatError, SparkBotError)


def test_canonical_text_round_trips():
    for text in [
        "up long max_model_len=4096",
        "bench max_tokens=64 runs=2 concurrency=1,2",
        "logs spark-lab-1 9",
        "fabric-test seconds=9",
    ]:
        command = parse(text)
        assert parse(command.text()) == command


def test_overrides_reach_the_serve_config_and_nothing_else():
    config = parse("up long gpu_memory_utilization=0.8").apply(CLUSTER, COMMANDS)
    assert config.serve.max_model_len == 65536 and config.serve.gpu_memory_utilization == 0.8
    assert config.model_copy(update={"serve": CLUSTER.serve}) == CLUSTER


def test_no_overrides_configured_means_none_allowed():
    with pytest.raises(CommandError, match="none: the config allows no override"):
        parse_command("up max_model_len=4096", CLUSTER, CommandsConfig())


def test_presets_must_stay_within_the_override_bounds():
    with pytest.raises(ValueError, match="outside"):
        CommandsConfig.model_validate(
            {
                "overrides": {"max_model_len": {"min": 1, "max": 10}},
                "presets": {"big": {"max_model_len": 11}},
            }
        )


ACCESS = Access(
    AccessConfig(
        read=AccessLevel(users=["*"], channels=["C0SPARKOPS", "C0GENERAL"]),
        operate=AccessLevel(users=["U0ALICE"], channels=["C0SPARKOPS"]),
    )
)


@pytest.mark.parametrize(
    ("level", "user", "channel", "allowed"),
    [
        ("read", "U0BOB", "C0SPARKOPS", True),
        ("read", "U0BOB", "C0OTHER", False),
        ("operate", "U0ALICE", "C0SPARKOPS", True),
        ("operate", "U0ALICE", "C0GENERAL", False),
        ("operate", "U0BOB", "C0SPARKOPS", False),
        ("read", "U0ALICE", "C0SPARKOPS", True),
    ],
)
def test_access_by_level(level, user, channel, allowed):
    assert ACCESS.check(level, user, channel, "x").allowed is allowed


def test_a_denial_says_who_may_run_it():
    decision = ACCESS.check("operate", "U0BOB", "C0SPARKOPS", "up")
    assert decision.reason == "`/spark up` needs operate access: <@U0ALICE>, in <#C0SPARKOPS>."


def test_operate_is_denied_by_default():
    decision = Access(AccessConfig()).check("operate", "U0ALICE", "C0SPARKOPS", "down")
    assert (
        not decision.allowed
        and "nobody has it" in decision.reason
        and "access.operate" in decision.reason
    )
    read = Access(AccessConfig()).check("read", "U0ANY", "C0ANY", "status")
    assert not read.allowed and "access.read" in read.reason, "read too: only where the config says"


def test_access_config_takes_ids_not_names():
    with pytest.raises(ValueError):
        AccessConfig.model_validate({"operate": {"users": ["alice"], "channels": ["#ops"]}})
