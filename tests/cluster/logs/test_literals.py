"""The literal screen (cluster.logs.literals) never changes an answer: every text a pattern matches
holds one of the literals read from it, and the screened table finds what searching every
pattern finds. Checked on the real tables (signatures, checkpoint spellings, secret shapes,
shutdown markers), on texts generated from each pattern, and on the logs in tests/data."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.config import Knowledge
from cluster.diagnosis.engine import LogDiagnoser, match_line
from cluster.diagnosis.failures import SHUTDOWN_MARKERS, SIGNATURES
from cluster.logs.literals import Screen, required_literals
from cluster.logs.logtext import clean_line, strip_prefixes
from cluster.progress.checkpoints import CHECKPOINTS, spellings_for
from cluster.redact import _TOKEN_SHAPES, redact

TABLES: dict[str, re.Pattern[str]] = {
    **{f"signature {s.id}": s.pattern for s in SIGNATURES},
    **{
        f"checkpoint {c.id} {i}": spelling.pattern
        for c in CHECKPOINTS
        if c.logged
        for i, spelling in enumerate(spellings_for(c, Knowledge()))
    },
    **{f"shutdown {i}": marker for i, (marker, _) in enumerate(SHUTDOWN_MARKERS)},
    "secret shapes": _TOKEN_SHAPES,
}
LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"


@pytest.mark.parametrize(
    ("pattern", "literals"),
    [
        (r"Docker image mismatch", {"Docker image mismatch"}),
        (r"\bEngineDeadError\b|EngineCore failed", {"EngineDeadError", "EngineCore failed"}),
        (r"failed with (?:19|No such device)", {"failed with 19", "failed with No such device"}),
        (r"https?://x\.com", {"http://x.com", "https://x.com"}),
        (r"(?<![A-Za-z])gh[pos]_[A-Za-z0-9]{20,}", {"ghp_", "gho_", "ghs_"}),
        (r"(?:AKIA|ASIA)[A-Z0-9]{16}", {"AKIA", "ASIA"}),
        (r"Loading took (?P<s>[\d.]+) seconds", {"Loading took "}),  # the longest piece
        (r"(?i)Address already in use", {"address already in use"}),
        (r"x(?i:ab)", {"xab"}),  # a local (?i) folds the whole pattern: looser, still true
        (r"foo|\d+", None),  # one branch needs no fixed text: so neither does the pattern
        (r"^\s*$", None),
        (r"(?:abc)?def", {"def"}),
        (r"(?:ab)+cd", {"ab"}),
    ],
)
def test_required_literals(pattern: str, literals: set[str] | None) -> None:
    found = required_literals(re.compile(pattern))
    assert (set(found) if found is not None else None) == literals


def test_every_table_pattern_is_screened() -> None:
    """Each pattern of the shipped tables has fixed text to screen by (none runs on every line)."""
    unscreened = [name for name, pattern in TABLES.items() if required_literals(pattern) is None]
    assert unscreened == []


@pytest.mark.parametrize("name", sorted(TABLES))
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_matching_text_holds_a_literal(name: str, data: st.DataObject) -> None:
    pattern = TABLES[name]
    literals = required_literals(pattern)
    assert literals is not None
    text = data.draw(st.from_regex(pattern))
    assert pattern.search(text)
    folded = text.lower() if pattern.flags & re.IGNORECASE else text
    assert any(literal in folded for literal in literals), (text, literals)
    assert Screen([pattern]).search(text) is not None


def _log_lines() -> list[str]:
    return [line for path in sorted(LOGS.iterdir()) for line in path.read_text().splitlines()]


class EveryPattern(Screen):
    """No screening: every pattern is searched, as before the screen."""

    def candidates(self, text: str) -> list[int]:
        return list(range(len(self.patterns)))


def test_screened_tables_agree_with_every_pattern_on_real_logs() -> None:
    lines = [line for path in sorted(LOGS.iterdir()) for line in path.read_text().splitlines()]
    patterns = list(TABLES.values())
    screened, everything = Screen(patterns), EveryPattern(patterns)
    signatures = EveryPattern([s.pattern for s in SIGNATURES])
    messages = [strip_prefixes(clean_line(line)) for line in lines]
    hits = 0
    for index, message in enumerate(messages):
        want = everything.search(message)
        got = screened.search(message)
        assert (want and (want.re, want.span())) == (got and (got.re, got.span())), message
        hits += want is not None
        previous = messages[max(0, index - 10) : index]
        want_row = match_line(message, previous, SIGNATURES, signatures)
        got_row = match_line(message, previous)
        assert (want_row and want_row[0].id) == (got_row and got_row[0].id), message
    assert len(lines) > 100 and hits > 10  # the logs do hold checkpoint and failure lines


def test_a_case_blind_pattern_is_not_screened_on_text_beyond_ascii():
    """re's case folding matches U+017F (long s) to `s`: lower-casing the text would not."""
    pattern = re.compile(r"address already in use", re.IGNORECASE)
    text = "bind: ADDRESS ALREADY IN U\u017fE"
    assert pattern.search(text) is not None
    assert Screen([pattern]).search(text) is not None


def test_redact_still_masks_every_shape() -> None:
    key = "AKIA" + "ABCDEFGHIJKLMNOP"
    text = f"token xoxb-123456-abcdef and {key} and hf_{'a1B2' * 6} and plain text"
    masked = redact(text)
    assert "xoxb-" not in masked and key not in masked and "hf_" not in masked
    assert masked.count("***") == 3 and masked.endswith("and plain text")


def test_diagnoser_with_a_taught_table_screens_its_rows() -> None:
    """An operator's knowledge row (a table not the built-in one) is screened by its own text."""
    taught = SIGNATURES[0].model_copy(
        update={"id": "taught", "pattern": re.compile(r"frobnicator (?:jammed|stuck)")}
    )
    diagnoser = LogDiagnoser(table=(taught, *SIGNATURES))
    assert diagnoser.feed("INFO 12-01 10:00:00 [x.py:1] all well") is None
    found = diagnoser.feed("ERROR 12-01 10:00:01 [x.py:2] the frobnicator stuck")
    assert found is not None and found.signature_id == "taught"
