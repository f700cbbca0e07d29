"""Deterministic tokenizer and text generator (exact token counts)."""

import re
import zlib

TOKEN_RE = re.compile(r"<\|[a-z_]+\|>|\s*\w+|\s*[^\w\s]|\s+")
VOCAB = 151643

REASONING = (
    "Okay, the user is asking a question and I should answer it clearly. Let me think about "
    "what they need. First, I will recall the relevant facts, then check them step by step. "
    "The key point is to be accurate and concise, so I will structure the answer with a short "
    "explanation and an example. Wait, I should also consider edge cases before answering. "
    "Alright, that covers it; now I will write the final answer."
)
ANSWER = (
    "Here is a clear answer to your question. The main idea is simple: break the problem into "
    "small parts, solve each part, and combine the results. For example, when two machines share "
    "one model, each holds half of the weights (≈ 60 GB each) and they exchange activations over "
    "a fast link. This keeps memory use balanced and lets the pair serve a model that does not fit on one "
    "machine. I hope this helps; let me know if you want more detail."
)
COMPLETION = (
    " the quick brown fox jumps over the lazy dog, and then it runs back across the field to "
    "the old barn where the farmer keeps the hay. Every morning the sun rises over the hills, "
    "the birds start to sing, and the day begins again with the same quiet rhythm."
)

_REASONING_TOKS = TOKEN_RE.findall(REASONING)


def _bytes_split(tokens):
    """A character outside ASCII as a byte-level tokenizer makes it: a token ending inside the
    character, which vLLM streams as an empty delta (its detokenizer holds incomplete UTF-8
    back; the usage count still rises), then the token completing it."""
    out = []
    for t in tokens:
        if not t.isascii():
            out.append("")
        out.append(t)
    return out


_ANSWER_TOKS = _bytes_split(TOKEN_RE.findall(ANSWER))
_COMPLETION_TOKS = TOKEN_RE.findall(COMPLETION)


def tokenize(text):
    return TOKEN_RE.findall(text or "")


def token_ids(tokens):
    return [zlib.crc32(t.encode("utf-8")) % VOCAB for t in tokens]


def _content_text(content):
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def chat_prompt(messages):
    """Qwen-style chat template; special tokens count as one token each."""
    parts = []
    for m in messages or []:
        parts.append(
            "<|im_start|>%s\n%s<|im_end|>\n"
            % (m.get("role", "user"), _content_text(m.get("content")))
        )
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def _cycle(base, n, offset=0):
    out = []
    i = offset % len(base)
    while len(out) < n:
        t = base[i]
        if not out and t[:1].isspace():
            t = t.lstrip()
        elif out and not t[:1].isspace() and t[:1].isalnum():
            t = " " + t  # keep re-tokenization stable across the wrap-around
        out.append(t)
        i = (i + 1) % len(base)
    return out


def seed_of(prompt_text):
    return zlib.crc32(prompt_text.encode("utf-8"))


def _length(natural, max_tokens, ignore_eos, min_tokens):
    """How many tokens a request generates and why it stops, as vLLM decides it."""
    target = natural
    if ignore_eos and max_tokens is not None:
        target = max_tokens
    target = max(target, min_tokens or 0)
    finish = "stop"
    if max_tokens is not None and target >= max_tokens:
        finish = "length" if (max_tokens < natural or ignore_eos) else "stop"
        target = max_tokens
    return target, finish


def plan_chat(prompt_text, reasoning, max_tokens, ignore_eos=False, min_tokens=0):
    """-> (reasoning_tokens, content_tokens, finish_reason)."""
    h = seed_of(prompt_text)
    n_r = (48 + h % 32) if reasoning else 0
    n_c = 40 + (h >> 8) % 40
    target, finish = _length(n_r + n_c, max_tokens, ignore_eos, min_tokens)
    r_t = min(n_r, target)
    c_t = target - r_t
    return _cycle(_REASONING_TOKS, r_t), _cycle(_ANSWER_TOKS, c_t), finish


def plan_completion(prompt_text, max_tokens, ignore_eos=False, min_tokens=0):
    h = seed_of(prompt_text)
    target, finish = _length(64 + h % 64, max_tokens, ignore_eos, min_tokens)
    toks = _cycle(_COMPLETION_TOKS, target, h % 7)
    if toks and not toks[0][:1].isspace():
        toks[0] = " " + toks[0]
    return toks, finish
