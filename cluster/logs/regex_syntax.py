"""A regular expression read into a small tree: as much of Python's syntax as finding the fixed
text a pattern needs takes (cluster.logs.literals).

Python documents the syntax (https://docs.python.org/3/library/re.html#regular-expression-syntax)
but keeps its parser private (`re._parser`, renamed and changed across versions), so this reads
the pattern itself. It reads only patterns `re` has compiled, so the syntax is valid; what it
does not spell out is `Unknown` (some text of any shape), and what it cannot follow at all
(verbose mode, a back reference by number, a conditional group, an escape it does not know)
makes the whole pattern `Unsupported`. Either costs only speed (that pattern is searched on
every line), never an answer.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = [
    "Chars",
    "Concat",
    "Either",
    "Empty",
    "Node",
    "Repeat",
    "Syntax",
    "Unknown",
    "Unsupported",
    "read",
]

SMALL_CLASS = 8  # a character class of at most this many characters is spelled out


class Unsupported(Exception):
    """A pattern this reader does not follow (the literal screen then runs it on every line)."""


@dataclass(frozen=True)
class Chars:
    """One character of `chars` (a literal: one of one); None: of too many to spell out."""

    chars: frozenset[str] | None


@dataclass(frozen=True)
class Empty:
    """Matches no text: an anchor (`^`, `\\b`), a look-around, a flag setting."""


@dataclass(frozen=True)
class Unknown:
    """Some text, of a shape not followed (a back reference by name)."""


@dataclass(frozen=True)
class Concat:
    """Its items one after another."""

    items: tuple[Node, ...]


@dataclass(frozen=True)
class Either:
    """One of its branches."""

    branches: tuple[Concat, ...]


@dataclass(frozen=True)
class Repeat:
    """Its item `low` to `high` times."""

    low: int
    high: int | None  # None: no limit
    item: Concat


Node = Chars | Empty | Unknown | Concat | Either | Repeat


@dataclass(frozen=True)
class Syntax:
    tree: Concat
    ignores_case: bool  # anywhere: re.IGNORECASE, `(?i)` or a local `(?i:...)`


_FLAG_LETTERS = "aiLmsux"
_CONTROL = {"a": "\a", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_CLASS_ESCAPES = "dDsSwW"  # a character of a category: too many to spell out
_ZERO_WIDTH_ESCAPES = "AbBZ"
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


def read(pattern: re.Pattern[str]) -> Syntax:
    """The tree of a compiled pattern; `Unsupported` when it cannot be followed."""
    if pattern.flags & re.VERBOSE:
        raise Unsupported("verbose mode")
    reader = _Reader(pattern.pattern)
    tree = reader.alternatives()
    if reader.at < len(reader.text):  # an unmatched `)`: re would not have compiled it
        raise Unsupported(f"unexpected {reader.text[reader.at]!r} at {reader.at}")
    return Syntax(_concat(tree), bool(pattern.flags & re.IGNORECASE) or reader.folds)


def _concat(node: Node) -> Concat:
    return node if isinstance(node, Concat) else Concat((node,))


class _Reader:
    def __init__(self, text: str):
        self.text = text
        self.at = 0
        self.folds = False

    def peek(self, ahead: int = 0) -> str:
        index = self.at + ahead
        return self.text[index] if index < len(self.text) else ""

    def take(self) -> str:
        if self.at >= len(self.text):
            raise Unsupported("the pattern ends early")
        char = self.text[self.at]
        self.at += 1
        return char

    def expect(self, char: str) -> None:
        if self.take() != char:
            raise Unsupported(f"expected {char!r} at {self.at - 1}")

    def alternatives(self) -> Node:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.at += 1
            branches.append(self.sequence())
        return branches[0] if len(branches) == 1 else Either(tuple(branches))

    def sequence(self) -> Concat:
        items: list[Node] = []
        while self.peek() not in ("", "|", ")"):
            if self.text.startswith("(?#", self.at):  # a comment: a quantifier after it
                self.at += 3  # repeats the item before it, as re reads it
                self.until(")")
                continue
            repeat = self.repeat()
            if repeat is None:
                items.append(self.atom())
            elif not items or isinstance(items[-1], Repeat):  # refused by re
                raise Unsupported(f"nothing to repeat at {self.at}")
            else:
                items[-1] = Repeat(repeat[0], repeat[1], _concat(items[-1]))
        return Concat(tuple(items))

    def repeat(self) -> tuple[int, int | None] | None:
        """The quantifier after an atom (its lazy `?` or possessive `+` changes no text)."""
        char = self.peek()
        bounds: tuple[int, int | None]
        if char == "*":
            bounds = (0, None)
        elif char == "+":
            bounds = (1, None)
        elif char == "?":
            bounds = (0, 1)
        elif char == "{":
            counted = self.counted()
            if counted is None:
                return None
            bounds = counted
        else:
            return None
        if char != "{":
            self.at += 1
        if self.peek() in ("?", "+"):
            self.at += 1
        return bounds

    def counted(self) -> tuple[int, int | None] | None:
        """`{m}`, `{m,}`, `{,n}`, `{m,n}`; anything else after `{` leaves it a literal `{`
        (as re reads it)."""
        match = re.compile(r"\{(\d*)(,(\d*))?\}").match(self.text, self.at)
        if match is None or match[0] == "{}":
            return None
        self.at = match.end()
        low = int(match[1]) if match[1] else 0
        if match[2] is None:
            return (low, low)
        return (low, int(match[3]) if match[3] else None)

    def atom(self) -> Node:
        char = self.take()
        if char == "(":
            return self.group()
        if char == "[":
            return self.character_class()
        if char == "\\":
            return self.escape(in_class=False)
        if char == ".":
            return Chars(None)
        if char in "^$":
            return Empty()
        return Chars(frozenset(char))  # `{`, `]` and `}` too: re reads them as themselves here

    def group(self) -> Node:
        if self.peek() != "?":
            return self.inside()
        self.at += 1
        kind = self.take()
        if kind == ":" or kind == ">":  # non-capturing; atomic (matches its content's text)
            return self.inside()
        if kind == "P":
            after = self.take()
            if after == "<":
                self.until(">")
                return self.inside()
            if after == "=":  # a back reference: the text of another group
                self.until(")")
                return Unknown()
            raise Unsupported(f"(?P{after} at {self.at})")
        if kind in "=!":
            self.inside()
            return Empty()
        if kind == "<" and self.peek() in "=!":
            self.at += 1
            self.inside()
            return Empty()
        if kind in _FLAG_LETTERS or kind == "-":
            return self.flags(kind)
        raise Unsupported(f"(?{kind} at {self.at})")

    def inside(self) -> Concat:
        node = self.alternatives()
        self.expect(")")
        return _concat(node)

    def until(self, end: str) -> str:
        start = self.at
        while self.take() != end:
            pass
        return self.text[start : self.at - 1]

    def flags(self, first: str) -> Node:
        """`(?ims)` (the whole pattern's: already in `pattern.flags`) or `(?i-s:...)`."""
        on, off, turning_off = first if first != "-" else "", "", first == "-"
        while True:
            char = self.take()
            if char in (")", ":"):
                break
            if char == "-":
                turning_off = True
            elif char in _FLAG_LETTERS:
                if turning_off:
                    off += char
                else:
                    on += char
            else:
                raise Unsupported(f"flag {char!r}")
        if "x" in on:
            raise Unsupported("verbose mode")
        if char == ")":
            return Empty()
        # a local (?i:...) makes the screen compare the whole pattern in lower case: looser,
        # still true; a local (?-i:...) inside an ignore-case pattern is then looser too
        self.folds |= "i" in on
        return self.inside()

    def character_class(self) -> Chars:
        negated = self.peek() == "^"
        if negated:
            self.at += 1
        chars: set[str] | None = set()
        first = True
        while True:
            char = self.take()
            if char == "]" and not first:
                break
            first = False
            low = self.class_item(char)
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.at += 1
                high = self.class_item(self.take())
                if low is None or high is None:
                    raise Unsupported("a range of a category")
                span = ord(next(iter(high))) - ord(next(iter(low)))
                if chars is not None and span < SMALL_CLASS:
                    chars.update(chr(ord(next(iter(low))) + i) for i in range(span + 1))
                else:
                    chars = None
            elif low is None or chars is None:
                chars = None
            else:
                chars |= low
        if negated or chars is None or len(chars) > SMALL_CLASS:
            return Chars(None)
        return Chars(frozenset(chars))

    def class_item(self, char: str) -> frozenset[str] | None:
        """One character of a class (None: a category, `\\d`)."""
        if char != "\\":
            return frozenset(char)
        node = self.escape(in_class=True)
        return node.chars if isinstance(node, Chars) else None

    def escape(self, *, in_class: bool) -> Chars | Empty:
        char = self.take()
        if char in _CONTROL:
            return Chars(frozenset(_CONTROL[char]))
        if char in _CLASS_ESCAPES:
            return Chars(None)
        if char == "b" and in_class:  # a backspace inside a class
            return Chars(frozenset("\b"))
        if char in _ZERO_WIDTH_ESCAPES and not in_class:
            return Empty()
        if char in _HEX_DIGITS:
            digits = self.text[self.at : self.at + _HEX_DIGITS[char]]
            self.at += len(digits)
            return Chars(frozenset(chr(int(digits, 16))))
        if char == "N":
            self.expect("{")
            return Chars(frozenset(unicodedata.lookup(self.until("}"))))
        if char == "0":  # an octal escape: \0, \0o, \0oo
            digits = "0"
            while len(digits) < 3 and self.peek() in tuple("01234567"):
                digits += self.take()
            return Chars(frozenset(chr(int(digits, 8))))
        if char.isascii() and char.isalnum():  # \1 (a back reference or octal), a new escape
            raise Unsupported(f"the escape \\{char}")
        return Chars(frozenset(char))  # an escaped punctuation or non-ASCII character
