from pathlib import Path

import pytest
import yaml

from bot.cli import main
from bot.config import load_config
from cluster.config import resolve_secrets
from cluster.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_seed_config_describes_the_real_pair():
    cluster = load_config(CONFIGS / "sparks.example.yaml").cluster
    assert [n.name for n in cluster.nodes] == ["spark-head", "spark-worker"]
    assert cluster.head.ssh.host == "10.1.230.180" and cluster.head.ssh.user == "aurora"
    assert [n.fabric_ip for n in cluster.nodes] == ["192.168.200.12", "192.168.200.13"]
    assert cluster.workers[0].ssh.jump == "spark-head"
    assert cluster.container.image == "hellohal2064/vllm-qwen3.5-gb10"
    assert cluster.container.name == "vllm_qwen35"
    assert cluster.serve.model == "Qwen/Qwen3.5-122B-A10B-FP8"
    assert cluster.serve.tensor_parallel_size == 2 and cluster.serve.backend == "ray"
    assert cluster.serve.gpu_memory_utilization == 0.90
    assert cluster.serve.max_model_len == 32768 and cluster.serve.reasoning_parser
    assert cluster.head.ssh.key.is_absolute(), "~ is expanded at load time"


def test_lab_config_points_at_the_lab():
    cluster = load_config(CONFIGS / "lab.yaml").cluster
    assert cluster.head.ssh.host == "198.18.0.10"
    assert cluster.nodes[1].docker_socket == "/run/spark-lab/node1/docker.sock"
    assert cluster.head.ssh.known_hosts == Path("/var/lib/spark-lab/ssh/known_hosts")


def _write(tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return path


def test_invalid_value_names_file_line_field_and_choices(tmp_path):
    seed = (CONFIGS / "sparks.example.yaml").read_text()
    path = _write(tmp_path, seed.replace("backend: ray", "backend: slurm"))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    line = seed.splitlines().index("    backend: ray") + 1
    assert str(path) in message
    assert f"line {line}: cluster.serve.backend" in message
    assert "'ray' or 'mp'" in message and "'slurm'" in message


def test_shell_metacharacters_are_refused(tmp_path):
    seed = (CONFIGS / "sparks.example.yaml").read_text()
    path = _write(tmp_path, seed.replace("name: vllm_qwen35", "name: x;rm -rf /"))
    with pytest.raises(ConfigError, match=r"cluster\.container\.name"):
        load_config(path)


def test_unknown_field_and_bad_jump_are_refused(tmp_path):
    seed = (CONFIGS / "sparks.example.yaml").read_text()
    with pytest.raises(ConfigError, match=r"cluster\.serve\.tensor_paralel_size: Extra inputs"):
        load_config(_write(tmp_path, seed.replace("tensor_parallel_size", "tensor_paralel_size")))
    with pytest.raises(ConfigError, match="jump 'nowhere' must name another node"):
        load_config(_write(tmp_path, seed.replace("jump: spark-head", "jump: nowhere")))


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(_write(tmp_path, "cluster: [\n"))


def test_secrets_are_resolved_from_the_environment_and_redacted():
    cluster = load_config(CONFIGS / "sparks.example.yaml").cluster
    with pytest.raises(ConfigError, match="HF_TOKEN, SPARK_API_KEY"):
        resolve_secrets(cluster, {})
    secrets = resolve_secrets(
        cluster, {"HF_TOKEN": "hf_supersecret", "SPARK_API_KEY": "plain-key-12"}
    )
    assert secrets.container_env() == {"HF_TOKEN": "hf_supersecret", "VLLM_API_KEY": "plain-key-12"}
    assert secrets.api_key == "plain-key-12"
    assert secrets.redact("token=hf_supersecret key=plain-key-12") == "token=*** key=***"
    assert "hf_supersecret" not in repr(secrets) and "plain-key-12" not in repr(secrets)


def test_check_config_prints_resolved_config_with_secrets_masked(capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_supersecret")
    assert main(["check-config", str(CONFIGS / "sparks.example.yaml")]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "Qwen/Qwen3.5-122B-A10B-FP8" in out
    assert "$HF_TOKEN (set, value hidden)" in out
    assert "hf_supersecret" not in out


def test_check_config_masks_env_values_by_name_and_by_shape(tmp_path, capsys):
    seed = (CONFIGS / "sparks.example.yaml").read_text()
    wandb = "0123456789abcdef0123456789abcdef01234567"  # hex: only its name says it is a key
    text = seed.replace(
        'RAY_memory_monitor_refresh_ms: "0"',
        "\n      ".join(
            [
                'RAY_memory_monitor_refresh_ms: "0"',
                "HF_HUB_AUTH: hubAuthValue1",
                f"WANDB_KEY: {wandb}",
                "STORAGE_KEY: /run/secrets/db",
                "EXTRA_SETTING: hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
            ]
        ),
    ).replace(
        "served_model_name: qwen35",
        "served_model_name: qwen35\n"
        "    extra_args: [--api-key=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf6hIj9k]",
    )
    assert main(["check-config", str(_write(tmp_path, text))]) == 0
    out = capsys.readouterr().out
    for secret in ["hubAuthValue1", wandb, "/run/secrets/db", "hf_AbCdEf", "sk-proj-Ab3d"]:
        assert secret not in out
    for masked in [
        "HF_HUB_AUTH: '***'",
        "WANDB_KEY: '***'",
        "STORAGE_KEY: '***'",
        "EXTRA_SETTING: '***'",
        "- --api-key=***",
    ]:
        assert masked in out, out
    assert "PYTORCH_CUDA_ALLOC_CONF: expandable_segments:True" in out, "ordinary values are shown"


def test_check_config_reports_errors_on_stderr(tmp_path, capsys):
    path = _write(tmp_path, "cluster: {}\n")
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "cluster.nodes: Field required" in err


def test_a_pasted_secret_is_refused_without_being_echoed(tmp_path):
    seed = (CONFIGS / "sparks.example.yaml").read_text()
    pasted = seed.replace("HF_TOKEN: HF_TOKEN", "HF_TOKEN: hf_pastedsecretvalue123")
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, pasted))
    assert "cluster.container.secret_env.HF_TOKEN" in str(err.value)
    assert "hf_pastedsecretvalue123" not in str(err.value)
    in_env = seed.replace('RAY_memory_monitor_refresh_ms: "0"', "WANDB_API_KEY: abc123secret")
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, in_env))
    assert "looks like a secret: move it to secret_env" in str(err.value)
    assert "abc123secret" not in str(err.value)


TOKEN = "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"


@pytest.mark.parametrize(
    ("planted", "secret"),
    [
        # a value with no token shape, on the line the parser stops at: str(yaml error) quotes that line
        ('HF_TOKEN: HF_TOKEN\n      WANDB_KEY: "correct horse battery', "correct horse"),
        (f"HF_TOKEN: HF_TOKEN\n\tSLACK: {TOKEN}", TOKEN),
        (f"HF_TOKEN: HF_TOKEN\n      SLACK: [{TOKEN}, ", TOKEN),
    ],
    ids=["unclosed-quote", "tab", "unclosed-list"],
)
def test_a_yaml_syntax_error_says_where_without_echoing_the_line(tmp_path, capsys, planted, secret):
    seed = (CONFIGS / "sparks.example.yaml").read_text()
    path = _write(tmp_path, seed.replace("HF_TOKEN: HF_TOKEN", planted))
    planted_line = (
        next(n for n, line in enumerate(seed.splitlines(), 1) if "HF_TOKEN: HF_TOKEN" in line) + 1
    )
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: not valid YAML: " in err and f"(line {planted_line}, column" in err, err
    assert secret not in err and "xoxb-" not in err, err


@pytest.mark.parametrize(
    ("old", "new", "secret", "field"),
    [
        ("backend: ray", f"backend: {TOKEN}", TOKEN, "cluster.serve.backend"),
        (
            "served_model_name: qwen35",
            "served_model_name: qwen35\n    extra_args: ['--hf-token=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123;']",
            "hf_AbCdEfGhIjKlMnOp",
            "cluster.serve.extra_args.0",
        ),
        (
            'RAY_memory_monitor_refresh_ms: "0"',
            'WANDB_KEY: "0123456789abcdef!"',
            "0123456789abcdef",
            "cluster.container.env",
        ),
        (
            'RAY_memory_monitor_refresh_ms: "0"',
            f'EXTRA: "{TOKEN}!"',
            TOKEN,
            "cluster.container.env",
        ),
        ("user: aurora", f"user: {TOKEN}", TOKEN, "cluster.nodes.0.ssh.user"),
    ],
    ids=["literal", "extra_args", "env-secret-name", "env-token-shape", "ssh-user"],
)
def test_a_validation_error_names_the_field_without_echoing_a_secret(
    tmp_path, capsys, old, new, secret, field
):
    seed = (CONFIGS / "sparks.example.yaml").read_text()
    assert old in seed
    assert main(["check-config", str(_write(tmp_path, seed.replace(old, new, 1)))]) == 2
    err = capsys.readouterr().err
    assert field in err and secret not in err, err


def test_an_ordinary_bad_env_value_is_still_quoted(tmp_path):
    seed = (CONFIGS / "sparks.example.yaml").read_text()
    with pytest.raises(ConfigError, match=r"env NCCL_DEBUG='INFO;': values may hold"):
        load_config(
            _write(
                tmp_path, seed.replace('RAY_memory_monitor_refresh_ms: "0"', 'NCCL_DEBUG: "INFO;"')
            )
        )


def test_a_knowledge_file_named_in_the_config_is_loaded_relative_to_it(tmp_path):
    (tmp_path / "k.yaml").write_text((CONFIGS / "knowledge.example.yaml").read_text())
    config = tmp_path / "sparks.yaml"
    config.write_text(
        (CONFIGS / "lab-real.yaml")
        .read_text()
        .replace("cluster:\n", "cluster:\n  knowledge: k.yaml\n", 1)
    )
    knowledge = load_config(config).cluster.knowledge
    assert [row.id for row in knowledge.signatures] == ["example_moe_kernel_missing"]
    assert "engine ready in" in knowledge.checkpoints["engine"][0].pattern


def test_a_bad_knowledge_file_names_itself_the_line_and_the_field(tmp_path):
    (tmp_path / "k.yaml").write_text(
        "checkpoints:\n  weights:\n    - pattern: ok\n  warmup:\n    - pattern: x\n"
    )
    config = tmp_path / "sparks.yaml"
    config.write_text(
        (CONFIGS / "lab.yaml")
        .read_text()
        .replace("cluster:\n", "cluster:\n  knowledge: k.yaml\n", 1)
    )
    with pytest.raises(ConfigError) as error:
        load_config(config)
    assert f"{tmp_path / 'k.yaml'}: 1 invalid setting(s)" in str(error.value)
    assert "line 5: checkpoints.warmup: Input should be 'nccl'" in str(error.value)


def test_a_path_with_a_nul_character_is_refused_by_name(tmp_path):
    data = yaml.safe_load((CONFIGS / "lab.yaml").read_text())
    data["cluster"]["nodes"][0]["ssh"]["key"] = "\x00"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"cluster\.nodes\.0\.ssh\.key: .*cannot hold a NUL"):
        load_config(path)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("cluster", "nodes", 0, "ssh", "key"), "~nosuchuser/.ssh/id_ed25519"),
        (("cluster", "nodes", 0, "ssh", "known_hosts"), "~0"),
        (("store", "path"), "~nosuchuser/spark-bot.db"),
        (("cluster", "knowledge"), "~nosuchuser/knowledge.yaml"),
    ],
)
def test_a_home_of_a_user_this_machine_lacks_is_refused_by_name(tmp_path, where, value):
    # pathlib's expanduser raises RuntimeError for `~user` with no home (a traceback before)
    data = yaml.safe_load((CONFIGS / "lab.yaml").read_text())
    node = data
    for key in where[:-1]:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    node[where[-1]] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    said = str(error.value)
    assert said.startswith(f"{path}: ") and "names no user with a home on this machine" in said


def test_more_ranks_than_the_nodes_have_gpus_is_refused_before_anything_starts(tmp_path):
    # TP 4 on two Sparks of one GPU each passed every check and started both containers, which
    # then waited for GPUs that do not exist (issue 26, item 6)
    seed = (CONFIGS / "sparks.example.yaml").read_text()
    four = seed.replace("tensor_parallel_size: 2", "tensor_parallel_size: 4")
    with pytest.raises(ConfigError) as refused:
        load_config(_write(tmp_path, four))
    said = str(refused.value)
    assert "4 ranks need 4 GPUs; the nodes have 2 (spark-head: 1, spark-worker: 1)" in said
    assert main(["check-config", str(tmp_path / "bad.yaml")]) == 2


def test_a_node_with_more_gpus_carries_more_ranks(tmp_path):
    seed = (CONFIGS / "sparks.example.yaml").read_text()
    four = seed.replace("tensor_parallel_size: 2", "tensor_parallel_size: 4")
    data = yaml.safe_load(four)
    for node in data["cluster"]["nodes"]:
        node["gpus"] = 2
    path = tmp_path / "four.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_config(path).cluster.serve.world_size == 4
