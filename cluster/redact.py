"""Secrets out of text before it is stored, logged or shown.

Two nets: the secret values the bot knows (resolved from its environment), and anything shaped
like a credential even when nobody told us it is one (a token pasted into a chat command, a key
in a container's log). A shape is either a vendor's prefix or a long high-entropy string:

- Slack: bot/user/app/config tokens (`xoxb-`, `xoxp-`, `xoxa-`, `xoxr-`, `xoxs-`, `xoxo-`, `xoxe-`,
  `xoxe.xoxp-`, `xapp-`) and incoming-webhook URLs (`https://hooks.slack.com/services/...`);
- Hugging Face `hf_` + 20 or more letters/digits; OpenAI-style `sk-` (`sk-proj-`, `sk-ant-`...) +
  20 or more; GitHub `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_` + 20 or more, `github_pat_`; AWS access key
  ids (`AKIA`/`ASIA` + 16 upper-case letters/digits); PEM private-key blocks;
- a long high-entropy string: a run of 32 or more base64/base64url characters that mixes upper
  case, lower case and digits, has a Shannon entropy of at least 4.0 bits per character (random
  32-character keys have about 4.5), and is not made of identifiers: less than 60% of it in
  words (`Generation`, `Qwen`, `CHAR`) and hexadecimal ids (8+ digits), and at most one separator
  (`/ _ = + -`) per 8 characters. `Qwen3_5MoeForConditionalGeneration`,
  `char_to_order_map=IBM855_RUSSIAN_CHAR_TO_ORDER` and URL paths fail these; about 98% of
  random 32-character keys pass them, 99% at 40 characters, 99.8% at 64 (the known-value and
  vendor-shape nets do not depend on these odds).

Left alone, because the bot shows them as evidence: hexadecimal strings of any length (image and
container ids, `sha256:` digests, commit and Ray node ids, request ids), paths, model names
(`Qwen/Qwen3.5-122B-A10B-FP8`), ordinary log text. A secret made of hexadecimal digits only is
therefore caught by its known value or its key's name (`secret_name`), not by its shape.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Iterable

from cluster.logs.literals import Screen

MASK = "***"

_TOKEN_SHAPES = re.compile(
    "|".join(
        [
            r"(?<![A-Za-z0-9])xox(?:[abposr]|e(?:\.xox[bp])?)-[A-Za-z0-9-]{6,}",
            r"(?<![A-Za-z0-9])xapp-[A-Za-z0-9-]{6,}",
            r"https?://hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers|commands|actions)/[A-Za-z0-9/_-]+",
            r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{20,}",
            r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}",
            r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{20,}",
            r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{20,}",
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])",
            # to its END line, or (a block cut short) over its base64 body (\n escapes of JSON included)
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----|[A-Za-z0-9+/=\r\n\\]*)",
        ]
    )
)
_TOKEN_SCREEN = Screen([_TOKEN_SHAPES])  # most text has none of the shapes' fixed prefixes
_RUN = re.compile(r"[A-Za-z0-9+/=_-]{32,}")
_HEX = re.compile(r"[0-9A-Fa-f-]+")
# What makes a long run ordinary: words (`Generation`, `CHAR`) and hexadecimal ids inside it,
# and separators between identifiers (`char_to_order_map=IBM855_RUSSIAN`, `org/wiki/List_of`).
_ORDINARY = re.compile(r"[A-Z]?[a-z]{3,}|[A-Z]{4,}|[0-9a-f]{8,}|[0-9A-F]{8,}")
_SEPARATOR = re.compile(r"[/_=+-]")
MIN_LENGTH = 32
MIN_ENTROPY = 4.0
MAX_ORDINARY = 0.6
MAX_SEPARATORS = 1 / 8

_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|AUTH|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE", re.IGNORECASE
)


def shannon_entropy(text: str) -> float:
    """Bits per character of `text`'s own character frequencies."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def high_entropy(run: str) -> bool:
    """Is this run of base64 characters random enough to be a key (see the module's rule)?"""
    if len(run) < MIN_LENGTH or _HEX.fullmatch(run):
        return False
    if not (
        any(c.isupper() for c in run)
        and any(c.islower() for c in run)
        and any(c.isdigit() for c in run)
    ):
        return False
    if sum(map(len, _ORDINARY.findall(run))) >= len(run) * MAX_ORDINARY:
        return False
    if len(_SEPARATOR.findall(run)) > len(run) * MAX_SEPARATORS:
        return False
    return shannon_entropy(run) >= MIN_ENTROPY


def redact(text: str, known: Iterable[str] = ()) -> str:
    """`text` with each known secret value, each token shape and each high-entropy run masked."""
    for value in sorted(known, key=len, reverse=True):
        if len(value) >= 4:
            text = text.replace(value, MASK)
    if _TOKEN_SCREEN.candidates(text):
        text = _TOKEN_SHAPES.sub(MASK, text)
    return _RUN.sub(lambda match: MASK if high_entropy(match.group()) else match.group(), text)


def looks_secret(value: str) -> bool:
    """Would `redact` mask any part of this value?"""
    return redact(value) != value


def secret_name(name: str) -> bool:
    """Does a variable's name say it holds a secret (HF_HUB_AUTH, WANDB_KEY, DB_PASSWORD...)?"""
    return bool(_SECRET_NAME.search(name))


class RedactingFilter(logging.Filter):
    """Masks secrets in every record a handler emits: the message with its arguments, and the
    traceback. Installed on handlers (not loggers) so that records of every logger pass it."""

    def __init__(self, known: Iterable[str] = ()):
        super().__init__()
        self.known = tuple(known)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.msg, record.args = redact(message, self.known), None
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.known)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.known)
        return True
