"""The corpus of real logs scored, both parts side by side (tests/cluster/diagnosis/corpus.py).

Asserted on the development part: no healthy start-up called failed, no failure called healthy;
on the held-out part: the same, by its counts. On both parts: a floor at the score measured when the rows were last written (a ratchet: a
regression fails CI; raise the floors when the score rises). The held-out part is only ever
scored in aggregate."""

from __future__ import annotations

import pytest

from tests.cluster.diagnosis.corpus import CASES, load_cases, score, table

# Measured on 2026-12-04 with 270 cases (182 development, 88 held-out): right family 181/182
# and 77/88 (before that session's work, on the first 198: 129/133 and 53/65). On 2026-12-07,
# with 117 cases more gathered in five rounds (e- to i-, each scored before any row was written
# from its development part: 54/60, 12/15, 11/12, 9/9 and 18/21 right), 387 cases (264 + 123):
# 261/264 and 111/123 (90.2 %). The three development misses are cases whose family sits on a
# boundary the thread itself leaves open (a model type transformers does not know, on a vLLM
# too old for it; a launcher's own refusal quoted alone; a CUDA error told for a length).
# Shares, so that new cases do not trip them by their number alone.
FLOOR = {"development": 0.98, "held-out": 0.90}
# healthy logs with every checkpoint-like line recognised (27/27 and 9/9 when measured)
CHECKPOINTS_FLOOR = {"development": 1.0, "held-out": 1.0}


@pytest.fixture(scope="module")
def scores():
    cases = load_cases()
    if not cases:
        pytest.skip(f"no corpus cases in {CASES}")
    found = score(cases)
    print("\n" + table(found))
    return found


def test_the_development_part_calls_no_failure_healthy_and_no_healthy_start_up_failed(scores):
    development = scores["development"]
    assert development.failures_called_healthy == 0, table(scores)
    assert development.healthy_called_failed == 0, table(scores)


def test_neither_part_calls_a_healthy_start_up_failed_or_a_failure_healthy(scores):
    # held out too (its counts only)
    assert scores["held-out"].healthy_called_failed == 0, table(scores)
    assert scores["held-out"].failures_called_healthy == 0, table(scores)


@pytest.mark.parametrize("part", ["development", "held-out"])
def test_the_right_family_stays_above_its_floor(scores, part):
    assert scores[part].right_family_share >= FLOOR[part], table(scores)


@pytest.mark.parametrize("part", ["development", "held-out"])
def test_healthy_logs_checkpoints_stay_recognised(scores, part):
    s = scores[part]
    if s.healthy:
        assert s.checkpoints_recognised / s.healthy >= CHECKPOINTS_FLOOR[part], table(scores)
