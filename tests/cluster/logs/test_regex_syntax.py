"""The regex reader behind the literal screen (cluster.logs.regex_syntax): it reads Python's
syntax as `re` does, or says it cannot. The property: for any pattern (built from the syntax's
pieces: escapes, classes, groups of every kind, quantifiers, comments, flags), every text `re`
matches holds one of the literals read from it; the corners are each pinned with the literal
`re` implies."""

from __future__ import annotations

import re
import warnings

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cluster.logs.literals import Screen, required_literals
from cluster.logs.regex_syntax import Unsupported, read

ATOMS = [
    "a", "b", "ab", "K", "\\.", "\\(", "\\{", "{", "}", "]", "-", "\\x41", "\\u0062", "\\n",
    "\\t", "\\0", "\\N{LATIN SMALL LETTER A}", "[ab]", "[a-c]", "[^a]", "[]a]", "[a-]", "[\\]b]",
    "[\\d.]", "\\d", "\\w", "\\S", ".", "\\b", "\\B", "^", "$", "\\A", "\\Z", "(?=a)", "(?!b)",
    "(?<=a)", "(?<!b)", "(?#note)", "(?P<n>xy)", "(?i:ab)", "(?-i:Ab)", "(?s:a.)", "(?>ab)",
    "x{}", "x{2", "y{,}",
]  # fmt: skip
QUANTIFIERS = ["", "", "", "*", "+", "?", "{2}", "{0,1}", "{,2}", "{1,}", "*?", "++", "{1,3}?"]


@st.composite
def patterns(draw: st.DrawFn, depth: int = 0) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if depth < 2 and draw(st.booleans()):
            opener = draw(
                st.sampled_from(["(?:", "(", f"(?P<g{depth}{len(parts)}>", "(?>", "(?i:"])
            )
            atom = opener + draw(patterns(depth + 1)) + ")"
        else:
            atom = draw(st.sampled_from(ATOMS))
        parts.append(atom + draw(st.sampled_from(QUANTIFIERS)))
    text = "".join(parts)
    if draw(st.integers(0, 4)) == 0:
        text += "|" + draw(patterns(depth + 1))
    return draw(st.sampled_from(["", "(?i)", "(?m)"])) + text


def _compiled(text: str) -> re.Pattern[str] | None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a FutureWarning (a nested set) counts as refused
        try:
            return re.compile(text)
        except (re.error, FutureWarning, OverflowError):
            return None


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=patterns(), data=st.data())
def test_every_match_holds_a_literal(text: str, data: st.DataObject) -> None:
    pattern = _compiled(text)
    assume(pattern is not None)
    assert pattern is not None
    literals = required_literals(pattern)
    if literals is None:
        return
    matched = data.draw(st.from_regex(pattern))
    found = pattern.search(matched)
    assert found
    if pattern.flags & re.IGNORECASE or "(?i" in text:
        if not found[0].isascii():
            return  # the screen runs every pattern on text beyond ASCII
        assert any(literal in found[0].lower() for literal in literals), (matched, literals)
    else:
        assert any(literal in found[0] for literal in literals), (matched, literals)
    assert Screen([pattern]).search(matched) is not None


@pytest.mark.parametrize(
    ("pattern", "literals"),
    [
        (r"a(?#note){0,1}bc", {"bc"}),  # the quantifier after a comment repeats the `a`
        (r"x{2,y", {"x{2,y"}),  # not a quantifier: the `{` is itself
        (r"x{}", {"x{}"}),
        (r"a{,2}bc", {"bc"}),
        (r"[]a]z", {"]z", "az"}),  # a `]` first in a class is one of its characters
        (r"[a-]z", {"az", "-z"}),
        (r"\x41\u0062\N{LATIN SMALL LETTER C}", {"Abc"}),
        (r"\0\t", {"\0\t"}),
        (r"(?P<n>ab)cd", {"abcd"}),  # a group's text runs on into the next
        (r"(?P<n>ab)(?P=n)", {"ab"}),  # a back reference: some text
        (r"(?<=pre)fix(?!es)", {"fix"}),  # look-arounds match no text
        (r"(?mi)Ab", {"ab"}),  # an ignore-case flag among others
        (r"(?i)x(?-i:AB)", {"xab"}),  # compared in lower case: looser, still true
        (r"[\b]x", {"\bx"}),  # a backspace in a class
        (r"\bword\B", {"word"}),
        (r"\d+ GiB|\d+ MiB", {" GiB", " MiB"}),
        (r"(a)\1b", None),  # a back reference by number: not followed
        (r"(?x) a b c", None),  # verbose mode: not followed
        (r"(a)?(?(1)b|c)", None),  # a conditional group: not followed
    ],
)
def test_a_corner_of_the_syntax(pattern: str, literals: set[str] | None) -> None:
    found = required_literals(re.compile(pattern))
    assert (set(found) if found is not None else None) == literals


def test_verbose_by_flag_is_not_followed() -> None:
    with pytest.raises(Unsupported):
        read(re.compile("a b", re.VERBOSE))
