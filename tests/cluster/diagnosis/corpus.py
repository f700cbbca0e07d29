"""The corpus of real logs (tests/data/real_logs/cases/*.yaml): loading, the held-out split, and
scoring `cluster.diagnosis.engine` against it.

A third of the cases is held out from whoever writes failure rows and rules, by a seeded hash of
the case id; rows are written from the rest (the development part). Held-out cases are only
ever scored in aggregate: nothing here prints a held-out case's id, lines or answer.

`python -m tests.cluster.diagnosis.corpus` prints both parts' scores side by side.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from cluster.diagnosis.explain import explain

CASES = Path(__file__).resolve().parents[2] / "data" / "real_logs" / "cases"
SPLIT_SALT = b"spark-bot-corpus-v1:"

Part = Literal["development", "held-out"]


def part_of(case_id: str) -> Part:
    """The fixed, seeded split: a third of the ids is held out."""
    digest = hashlib.sha256(SPLIT_SALT + case_id.encode()).hexdigest()
    return "held-out" if int(digest, 16) % 3 == 0 else "development"


@dataclass(frozen=True)
class Case:
    id: str
    outcome: Literal["failure", "healthy"]
    family: str
    root_error: str
    log: str
    source: str = ""
    must_say: str = ""
    vllm_version: str = "unknown"

    @property
    def part(self) -> Part:
        return part_of(self.id)

    @property
    def lines(self) -> list[str]:
        return self.log.splitlines()


def load_cases(directory: Path = CASES) -> list[Case]:
    """Every case file, sorted by id (a file that is not a case is an error: the corpus is data
    the tests trust)."""
    cases = []
    for path in sorted(directory.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        cases.append(
            Case(
                id=str(data["id"]),
                outcome=data["outcome"],
                family=str(data["family"]),
                root_error=str(data.get("root_error") or ""),
                log=str(data["log"]),
                source=str(data.get("source", "")),
                must_say=str(data.get("must_say", "")),
                vllm_version=str(data.get("vllm_version", "unknown")),
            )
        )
    return cases


def development(cases: Iterable[Case]) -> list[Case]:
    return [case for case in cases if case.part == "development"]


@dataclass(frozen=True)
class Verdict:
    """What the diagnosis made of one case."""

    case: Case
    failed: bool  # the diagnosis says the start-up failed
    healthy: bool  # the diagnosis says it is healthy (proven by its end, or a requested stop)
    family: str
    quoted_root: bool  # the evidence line holds the case's root_error
    # healthy logs: lines that look like a checkpoint's but match no spelling
    checkpoints_missing: tuple[int, ...] = ()

    @property
    def right_family(self) -> bool:
        return self.family == self.case.family

    @property
    def failure_called_healthy(self) -> bool:
        return self.case.outcome == "failure" and self.healthy

    @property
    def healthy_called_failed(self) -> bool:
        return self.case.outcome == "healthy" and self.failed


def judge(case: Case) -> Verdict:
    explained = explain(case.lines)
    chosen = explained.diagnosis
    failed = explained.verdict == "failed"
    healthy = explained.verdict in ("healthy", "stopped")
    family = "healthy" if healthy else chosen.family if chosen is not None else "other"
    root = case.root_error.strip()
    quoted = bool(root) and chosen is not None and root in chosen.evidence
    missing = tuple(explained.unknown_checkpoint_lines) if case.outcome == "healthy" else ()
    return Verdict(case, failed, healthy, family, quoted, missing)


@dataclass
class Score:
    """One part's counts."""

    failures: int = 0
    healthy: int = 0
    right_family: int = 0
    root_quoted: int = 0
    failures_called_healthy: int = 0
    healthy_called_failed: int = 0
    # healthy logs in which every line that looks like a checkpoint's matched a spelling
    checkpoints_recognised: int = 0
    wrong: list[Verdict] = field(default_factory=list)

    @property
    def cases(self) -> int:
        return self.failures + self.healthy

    @property
    def right_family_share(self) -> float:
        return self.right_family / self.cases if self.cases else 1.0

    def add(self, verdict: Verdict) -> None:
        if verdict.case.outcome == "failure":
            self.failures += 1
            self.root_quoted += verdict.quoted_root
        else:
            self.healthy += 1
            self.checkpoints_recognised += not verdict.checkpoints_missing
        self.right_family += verdict.right_family
        self.failures_called_healthy += verdict.failure_called_healthy
        self.healthy_called_failed += verdict.healthy_called_failed
        if not verdict.right_family:
            self.wrong.append(verdict)


def score(cases: Iterable[Case]) -> dict[Part, Score]:
    scores: dict[Part, Score] = {"development": Score(), "held-out": Score()}
    for case in cases:
        scores[case.part].add(judge(case))
    return scores


def table(scores: dict[Part, Score]) -> str:
    """Both parts side by side (aggregate counts only)."""
    dev, held = scores["development"], scores["held-out"]
    rows = [
        ("cases (failures + healthy)", lambda s: f"{s.cases} ({s.failures} + {s.healthy})"),
        (
            "right family",
            lambda s: f"{s.right_family}/{s.cases} ({s.right_family_share:.0%})",
        ),
        ("root line quoted (failures)", lambda s: f"{s.root_quoted}/{s.failures}"),
        ("failures called healthy", lambda s: str(s.failures_called_healthy)),
        ("healthy called failed", lambda s: str(s.healthy_called_failed)),
        (
            "every checkpoint recognised (healthy)",
            lambda s: f"{s.checkpoints_recognised}/{s.healthy}",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{'':{width}}  {'development':>16}  {'held-out':>16}"]
    lines += [f"{name:{width}}  {show(dev):>16}  {show(held):>16}" for name, show in rows]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    cases = load_cases()
    scores = score(cases)
    print(table(scores))
    if "--wrong" in argv:  # the development part's misses, to write rows from
        for verdict in scores["development"].wrong:
            print(
                f"{verdict.case.id}: want {verdict.case.family}, got {verdict.family}"
                f" (root quoted: {verdict.quoted_root})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
