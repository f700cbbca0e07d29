"""`spark-bot sync-model --config F`, and `preflight` offering it for a partial model, on the
controller's events (scripted here; the lab runs the real copy: tests/cluster/in_lab/test_model_sync.py)."""

from __future__ import annotations

from bot.cli import main
from cluster.controller import Controller
from tests.handlers.remedies import SYNC_MODEL_REMEDY, model_incomplete

CONFIG = "configs/lab.yaml"


def play(events):
    async def operation(self, **options):
        for event in events:
            yield event

    return operation


def test_preflight_names_the_short_shard_and_the_command_that_fixes_it(monkeypatch, capsys):

    monkeypatch.setattr(Controller, "preflight", play([model_incomplete()]))
    assert main(["preflight", "--config", CONFIG]) == 1
    out = capsys.readouterr().out
    assert "✘ The model complete on every node on spark-lab-1 FAILED" in out
    assert "model-00002-of-00002.safetensors is 1.2 GiB of 4.0 GiB" in out
    assert f"    run:      spark-bot sync-model --config {CONFIG}\n" in out


def test_sync_model_prints_the_copys_progress_and_the_check_after(monkeypatch, capsys):

    monkeypatch.setattr(Controller, "sync_model", play(SYNC_MODEL_REMEDY.passes()))
    assert main(["sync-model", "--config", CONFIG]) == 0
    out = capsys.readouterr().out
    assert "2.0 GiB of ~8.0 GiB (25%), 1.0 GiB/s, about 6 s left" in out
    assert "✔ The model complete on every node" in out
