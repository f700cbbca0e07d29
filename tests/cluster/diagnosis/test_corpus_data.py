"""The corpus of real logs is data the scorer trusts: every case file must be well formed
(tests/data/real_logs/README.md). Nothing here runs the diagnosis."""

from __future__ import annotations

import yaml

from cluster.diagnosis.family_ids import FAMILY_IDS
from tests.cluster.diagnosis.corpus import CASES, load_cases

SOURCE_KINDS = {"github-issue", "github-discussion", "github-file", "forum", "blog"}


def test_every_case_file_is_named_by_its_id_and_has_a_public_source():
    for path in sorted(CASES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert data["id"] == path.stem, path.name
        assert str(data["source"]).startswith("https://"), path.name
        assert data["source_kind"] in SOURCE_KINDS, path.name
        assert str(data.get("must_say", "")).strip(), path.name


def test_every_case_has_a_known_outcome_and_family():
    for case in load_cases():
        assert case.outcome in ("failure", "healthy"), case.id
        assert case.family in (*FAMILY_IDS, "healthy"), case.id
        assert (case.family == "healthy") == (case.outcome == "healthy"), case.id
        assert case.lines, case.id


def test_every_failure_root_error_is_a_line_of_its_log():
    """The root error is text of one line, verbatim: the scorer looks for it in the quoted line."""
    for case in load_cases():
        if case.outcome == "failure":
            root = case.root_error.strip()
            assert root, case.id
            assert any(root in line for line in case.lines), case.id


def test_case_ids_are_unique():
    ids = [case.id for case in load_cases()]
    assert len(ids) == len(set(ids))
