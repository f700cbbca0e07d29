"""Which patterns of a table could match a line, by the fixed text each one needs.

Most log lines match none of the failure signatures, checkpoint spellings or secret shapes, yet
searching every regex of a table costs tens of microseconds a line in Python's `re` (a search
tries each pattern at each position). Nearly every pattern needs some fixed text in any match
(`Failed to connect to GCS`, `EngineDeadError`, one of `AKIA`/`ASIA`): `required_literals`
reads it from the pattern itself (cluster.logs.regex_syntax reads the syntax, no private part
of `re`), so the tables stay the only place that knows it, and
a `Screen` runs a pattern only on the lines that contain one of its literals (a `str` scan, a
fraction of a microsecond). A pattern with no such text (`^\\s*$`) is always run. The screen
never changes an answer: a line without any of a pattern's literals cannot match it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import product

from cluster.logs.regex_syntax import (
    Chars,
    Concat,
    Either,
    Empty,
    Node,
    Repeat,
    Unknown,
    Unsupported,
    read,
)

__all__ = ["Screen", "required_literals"]

_MAX_STRINGS = 64  # alternatives followed while spelling out a pattern's exact strings


class _Found:
    """What a piece of a pattern tells: `exact`, every string it can match (when few);
    `needs`, strings one of which is in every match (when any are known)."""

    __slots__ = ("exact", "needs")

    def __init__(self, exact: frozenset[str] | None, needs: frozenset[str] | None):
        self.exact = exact
        self.needs = needs if needs is not None else _useful(exact)


def _useful(strings: frozenset[str] | None) -> frozenset[str] | None:
    return strings if strings and "" not in strings else None


def _quality(strings: frozenset[str]) -> tuple[int, int]:
    """Longer literals screen better; fewer of them cost less to look for."""
    return min(map(len, strings)), -len(strings)


def _best(candidates: Iterable[frozenset[str] | None]) -> frozenset[str] | None:
    found = [c for c in candidates if c]
    return max(found, key=_quality) if found else None


def _shortest(strings: frozenset[str]) -> frozenset[str]:
    """Without the strings that contain another one of them: finding that one is enough."""
    return frozenset(s for s in strings if not any(o != s and o in s for o in strings))


def _spliced(sequence: Concat) -> Iterator[Node]:
    """The items with a group's items in its place: its text runs on into the next item's."""
    for item in sequence.items:
        if isinstance(item, Concat):
            yield from _spliced(item)
        else:
            yield item


def _concat(sequence: Concat) -> _Found:
    """Consecutive exact pieces multiply into longer strings; any other piece ends a run."""
    run: frozenset[str] | None = frozenset({""})
    candidates: list[frozenset[str] | None] = []
    whole_exact = True
    for item in _spliced(sequence):
        piece = _node(item)
        if (
            run is not None
            and piece.exact is not None
            and len(run) * len(piece.exact) <= _MAX_STRINGS
        ):
            run = frozenset(a + b for a, b in product(run, piece.exact))
            continue
        candidates.append(_useful(run))
        candidates.append(piece.needs)
        whole_exact = False
        run = piece.exact if piece.exact is not None else frozenset({""})
    candidates.append(_useful(run))
    return _Found(run if whole_exact else None, _best(candidates))


def _node(node: Node) -> _Found:
    if isinstance(node, Chars):
        return _Found(node.chars, None)
    if isinstance(node, Empty):  # matches no text: adds nothing, takes nothing away
        return _Found(frozenset({""}), None)
    if isinstance(node, Concat):
        return _concat(node)
    if isinstance(node, Either):
        branches = [_concat(branch) for branch in node.branches]
        exact: frozenset[str] | None = None
        if all(b.exact is not None for b in branches):
            union = frozenset().union(*(b.exact for b in branches if b.exact is not None))
            exact = union if len(union) <= _MAX_STRINGS else None
        needs = (
            frozenset().union(*(b.needs for b in branches if b.needs is not None))
            if all(b.needs is not None for b in branches)
            else None
        )
        return _Found(exact, needs)
    if isinstance(node, Repeat):
        inner = _concat(node.item)
        if node.low == 0:
            return _Found(
                inner.exact | {""} if inner.exact is not None and node.high == 1 else None, None
            )
        if node.low == node.high == 1:
            return inner
        return _Found(None, inner.needs)
    assert isinstance(node, Unknown)
    return _Found(None, None)  # a back reference: some text


def required_literals(pattern: re.Pattern[str]) -> frozenset[str] | None:
    """Strings of which every match of `pattern` contains at least one (lower-cased when the
    pattern ignores case), or None when none are known."""
    screened = _screened(pattern)
    return screened[0] if screened else None


def _screened(pattern: re.Pattern[str]) -> tuple[frozenset[str], bool] | None:
    """The required literals and whether they are compared in lower case."""
    try:
        syntax = read(pattern)
    except Unsupported:
        return None
    needs = _concat(syntax.tree).needs
    if needs is None:
        return None
    needs = _shortest(needs)
    if not syntax.ignores_case:
        return needs, False
    if not all(s.isascii() for s in needs):
        return None  # str.lower() is not one character for one outside ASCII
    return frozenset(s.lower() for s in needs), True


class Screen:
    """The patterns of a table (by index) that could match a text: those whose required
    literals it contains, and those without any."""

    def __init__(self, patterns: Sequence[re.Pattern[str]]):
        self.patterns = tuple(patterns)
        self._always: frozenset[int] = frozenset()
        always: set[int] = set()
        exact: list[tuple[str, int]] = []
        folded: list[tuple[str, int]] = []
        for index, pattern in enumerate(self.patterns):
            screened = _screened(pattern)
            if screened is None:
                always.add(index)
            else:
                literals, ignores_case = screened
                into = folded if ignores_case else exact
                into.extend((literal, index) for literal in sorted(literals))
        self._always = frozenset(always)
        # one flat list: a `str` scan per literal is the whole cost of a line that matches none
        self._exact = tuple(exact)
        self._folded = tuple(folded)

    @property
    def unscreened(self) -> list[re.Pattern[str]]:
        """The patterns run on every text (no literal found in them)."""
        return [self.patterns[i] for i in sorted(self._always)]

    def candidates(self, text: str) -> list[int]:
        """Indices, in table order, of the patterns worth searching in `text`."""
        found = {index for literal, index in self._exact if literal in text}
        if self._folded:
            if text.isascii():
                folded = text.lower()
                found.update(index for literal, index in self._folded if literal in folded)
            else:  # re folds U+017F (long s) to `s`, U+212A to `k`: no screening
                found.update(index for _, index in self._folded)
        if self._always:
            found |= self._always
        return sorted(found) if len(found) > 1 else list(found)

    def search(self, text: str) -> re.Match[str] | None:
        """The first pattern's (in table order) match in `text`, as trying each in turn
        with `re.search` would find it."""
        for index in self.candidates(text):
            match = self.patterns[index].search(text)
            if match:
                return match
        return None
