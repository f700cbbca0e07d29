"""A stream's chunks into lines of bounded length (cluster.logs.logtext.LineSplitter), as the log
follower and the launcher's output follower read them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cluster.logs.logtext import LineSplitter


def split(chunks: list[str], limit: int = 8) -> list[str]:
    splitter = LineSplitter(limit)
    lines = [line for chunk in chunks for line in splitter.feed(chunk)]
    last = splitter.end()
    return lines + ([last] if last is not None else [])


def test_lines_across_chunks_and_the_last_without_a_newline():
    assert split(["ab", "c\nde", "f\n\ng"]) == ["abc", "def", "", "g"]


def test_a_long_line_is_kept_cut_short_and_its_rest_skipped():
    assert split(["0123456789", "abc", "def\nnext\n"]) == ["01234567", "next"]
    assert split(["0123456789"]) == ["01234567"], "its rest is not a line of its own at the end"


def test_what_waits_for_a_newline_stays_bounded():
    splitter = LineSplitter(8)
    for _ in range(1000):
        splitter.feed("x" * 7)
    assert len(splitter._pending) <= 8 + 7


@given(st.lists(st.text(alphabet="ab\n", max_size=30), max_size=10))
def test_short_lines_come_out_as_the_whole_text_has_them(chunks):
    text = "".join(chunks)
    expected = text.split("\n")
    if expected[-1] == "":
        expected.pop()
    if all(len(line) <= 30 for line in expected):
        assert split(chunks, limit=30) == expected
