"""Recipes: loaded from the config and a recipes/ folder beside it, inheriting the cluster's
defaults, validated with errors that name the recipe and the field, applied by `up RECIPE`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bot.cli import main
from bot.config import load_config
from cluster.bench.history import cluster_fingerprint
from cluster.errors import ConfigError
from cluster.serving.containers import LABEL_RECIPE, create_body
from handlers import commands as c
from handlers.errors import CommandError
from handlers.settings import CommandsConfig
from handlers.specs import parse_command
from handlers.store import Store

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
SHIPPED = ["gpt-oss-120b-head", "minimax-m2.5-awq", "qwen35-122b-fp8"]


def a_config(tmp_path: Path, recipes: str = "", files: dict[str, str] | None = None) -> Path:
    """configs/lab.yaml with `recipes` appended under `cluster:`, and recipe files beside it."""
    text = (CONFIGS / "lab.yaml").read_text()
    path = tmp_path / "lab.yaml"
    path.write_text(text + recipes)
    if files:
        (tmp_path / "recipes").mkdir()
        for name, body in files.items():
            (tmp_path / "recipes" / f"{name}.yaml").write_text(body)
    return path


def test_the_shipped_recipes_load_beside_both_configs():
    for name in ("sparks.example.yaml", "lab.yaml"):
        cluster = load_config(CONFIGS / name).cluster
        assert sorted(cluster.recipes) == SHIPPED
        for recipe in cluster.recipes.values():
            assert recipe.sources, "every shipped recipe says where its flags come from"
    seed = load_config(CONFIGS / "sparks.example.yaml").cluster
    qwen = seed.with_recipe("qwen35-122b-fp8")
    assert qwen.serve == seed.serve.model_copy(update={"min_free_memory_gib": 100})
    assert qwen.container.image == seed.container.image == "hellohal2064/vllm-qwen3.5-gb10"


def test_a_recipe_inherits_how_the_cluster_runs_not_which_model_it_serves(tmp_path):
    cluster = load_config(
        a_config(
            tmp_path,
            "  recipes:\n    small:\n      nodes: head\n"
            "      serve: {model: org/small, backend: mp, tensor_parallel_size: 1}\n",
        )
    ).cluster
    small = cluster.recipes["small"].serve
    assert (small.port, small.gpu_memory_utilization, small.ray_port) == (8000, 0.9, 6379)
    assert small.reasoning_parser is None and small.max_model_len is None  # not the cluster's


def test_applying_a_recipe_swaps_image_serve_and_nodes_and_adds_env_and_mounts(tmp_path):
    cluster = load_config(
        a_config(
            tmp_path,
            files={
                "small": "nodes: head\nimage: org/image:1\nenv: {EXTRA: '1'}\n"
                "mounts: [{source: /models, target: /root/.cache/huggingface}]\n"
                "serve: {model: org/small, backend: mp, tensor_parallel_size: 1}\n"
            },
        )
    ).cluster
    small = cluster.with_recipe("small")
    assert [n.name for n in small.nodes] == [cluster.head.name]
    assert small.container.image == "org/image:1" and small.serve.model == "org/small"
    assert small.container.env == {**cluster.container.env, "EXTRA": "1"}
    assert [m.source for m in small.container.mounts] == ["/models"]  # same target: replaced
    assert small.recipe == "small" and small.with_recipe("small") == small
    body = create_body(small, small.head, "head", ["true"], {}, "/root")
    assert body["Labels"][LABEL_RECIPE] == "small"
    assert cluster_fingerprint(small, "sha256:x").serve["recipe"] == "small"
    assert cluster.with_recipe(None) is cluster
    with pytest.raises(ConfigError, match="unknown recipe 'big' \\(recipes: small\\)"):
        cluster.with_recipe("big")


def test_an_invalid_inline_recipe_names_the_recipe_the_field_and_the_line(tmp_path):
    path = a_config(
        tmp_path, "  recipes:\n    long:\n      serve: {model: org/m, max_model_len: 3}\n"
    )
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert "cluster.recipes.long.serve.max_model_len" in str(error.value)
    assert "greater than or equal to 16 (got 3)" in str(error.value)


def test_an_invalid_recipe_file_names_its_file_the_recipe_and_the_field(tmp_path):
    path = a_config(tmp_path, files={"wide": "nodes: all\nserve:\n  model: org/m\n  port: 0\n"})
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert f"{tmp_path}/recipes/wide.yaml line 4: recipe wide: serve.port" in str(error.value)


def test_a_recipe_that_cannot_run_on_its_nodes_is_refused_by_name(tmp_path):
    path = a_config(
        tmp_path, files={"solo": "nodes: head\nserve: {model: org/m, backend: mp}\n"}
    )  # TP 2 inherited from the cluster, on one node
    with pytest.raises(ConfigError, match="recipe solo: serve: backend mp runs one rank per node"):
        load_config(path)


def test_a_recipe_both_inline_and_in_a_file_or_named_like_a_preset_is_refused(tmp_path):
    path = a_config(
        tmp_path,
        "  recipes:\n    same:\n      serve: {model: org/m}\n",
        files={"same": "serve: {model: org/n}\n"},
    )
    with pytest.raises(ConfigError, match="recipe 'same' is both in the config and in"):
        load_config(path)
    clash = tmp_path / "clash"
    clash.mkdir()
    path = a_config(clash, files={"long": "serve: {model: org/n}\n"})
    path.write_text(
        path.read_text() + "commands:\n  overrides: {max_model_len: {min: 1024, max: 65536}}\n"
        "  presets: {long: {max_model_len: 65536}}\n"
    )
    with pytest.raises(ConfigError, match="'long' names both a recipe and a preset"):
        load_config(path)


def test_up_takes_a_recipe_then_a_preset_then_bounded_overrides():
    cluster = load_config(CONFIGS / "lab.yaml").cluster
    commands = CommandsConfig.model_validate(
        {
            "overrides": {"max_model_len": {"min": 1024, "max": 65536}},
            "presets": {"short": {"max_model_len": 4096}},
        }
    )
    command = parse_command("up gpt-oss-120b-head short max_model_len=8192", cluster, commands)
    assert command == c.Up(
        recipe="gpt-oss-120b-head", preset="short", overrides={"max_model_len": 8192}
    )
    assert command.text() == "up gpt-oss-120b-head short max_model_len=8192"
    applied = command.apply(cluster, commands)
    assert applied.recipe == "gpt-oss-120b-head" and applied.serve.max_model_len == 8192
    assert applied.serve.model == "openai/gpt-oss-120b" and len(applied.nodes) == 1
    assert parse_command("up short", cluster, commands).apply(cluster, commands).recipe is None
    with pytest.raises(CommandError, match=r"is outside 1024\.\.65536"):
        parse_command("up qwen35-122b-fp8 max_model_len=131072", cluster, commands)
    with pytest.raises(CommandError, match="`huge` is neither a recipe"):
        parse_command("up huge", cluster, commands)


async def test_the_store_keeps_the_recipe_of_the_launch(tmp_path):
    store = Store(tmp_path / "bot.db")
    await store.open()
    try:
        await store.set_launch("lab", 1, {"max_model_len": 8192.0}, "qwen35-122b-fp8")
        assert await store.launched_recipe("lab") == "qwen35-122b-fp8"
        assert await store.launch("lab") == {"max_model_len": 8192.0}
        await store.clear_launch("lab")
        assert await store.launched_recipe("lab") is None
    finally:
        await store.close()


def test_the_cli_refuses_an_unknown_recipe_before_connecting(tmp_path, capsys):
    shutil.copy(CONFIGS / "lab.yaml", tmp_path / "lab.yaml")
    assert main(["up", "--config", str(tmp_path / "lab.yaml"), "--recipe", "nope"]) == 2
    assert "unknown recipe 'nope' (recipes: none configured)" in capsys.readouterr().err


def test_the_recipes_listing_says_what_each_needs_and_which_one_runs():
    from bot.render_text import render_recipes
    from cluster.events import RecipesReport, RecipeSummary
    from handlers.specs import recipes_text

    summary = RecipeSummary(
        name="qwen35-122b-fp8",
        model="Qwen/Qwen3.5-122B-A10B-FP8",
        served_model_name="qwen35",
        nodes=["spark-head", "spark-worker"],
        tensor_parallel_size=2,
        pipeline_parallel_size=1,
        backend="ray",
        image="hellohal2064/vllm-qwen3.5-gb10",
        needs="55.4 GiB weights + 0.4 GiB KV cache (32768 tokens) + 5.2 GiB overhead a rank",
        fits=True,
        running=True,
        sources=["configs/sparks.example.yaml"],
    )
    report = RecipesReport(elapsed_s=0.1, recipes=[summary], running="qwen35-122b-fp8")
    text = render_recipes(report)
    assert text.startswith("qwen35-122b-fp8  [running]\n")
    assert "nodes: spark-head, spark-worker (TP 2 x PP 1, backend ray)" in text
    assert "needs: 55.4 GiB weights" in text and text.endswith("running: qwen35-122b-fp8")
    chat = recipes_text(report)
    assert "• `qwen35-122b-fp8` *running*: `Qwen/Qwen3.5-122B-A10B-FP8` on spark-head" in chat
    nothing = RecipesReport(elapsed_s=0.1, recipes=[summary.model_copy(update={"running": False})])
    assert recipes_text(nothing).endswith("No recipe is running.")
