"""Block Kit validation with Slack's limits and Slack's error vocabulary.

`validate_blocks(blocks)` returns ``(error, details)`` where ``error`` is the Slack
error code (``invalid_blocks``, ``invalid_blocks_format``, ``msg_blocks_too_long``)
or ``None`` when the blocks are acceptable, and ``details`` is the list of
human-readable messages Slack puts in ``errors`` / ``response_metadata.messages``
(``"must be less than 3001 characters [json-pointer:/blocks/0/text/text]"``).
"""

from __future__ import annotations

import json
from typing import Any

MAX_BLOCKS = 50
MAX_BLOCKS_JSON_CHARS = 12_000  # Slack reports msg_blocks_too_long around 12-13k chars
MAX_BLOCK_ID = 255
MAX_ACTION_ID = 255
MAX_SECTION_TEXT = 3000
MAX_SECTION_FIELDS = 10
MAX_SECTION_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTIONS_ELEMENTS = 25
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_URL = 3000
MAX_CONFIRM_TITLE = 100
MAX_CONFIRM_TEXT = 300
MAX_CONFIRM_BUTTON = 30
MAX_MARKDOWN_BLOCK_TEXT = 12_000
MAX_IMAGE_ALT_TEXT = 2000

KNOWN_BLOCK_TYPES = {
    "section",
    "header",
    "divider",
    "actions",
    "context",
    "image",
    "input",
    "rich_text",
    "markdown",
    "file",
    "video",
}


class _V:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def err(self, msg: str, ptr: str) -> None:
        self.errors.append(f"{msg} [json-pointer:{ptr}]")

    def max_len(self, value: Any, limit: int, ptr: str) -> None:
        if isinstance(value, str) and len(value) > limit:
            self.err(f"must be less than {limit + 1} characters", ptr)

    def text_obj(
        self,
        obj: Any,
        ptr: str,
        limit: int | None,
        plain_only: bool = False,
        required: bool = True,
    ) -> None:
        if obj is None:
            if required:
                self.err("missing required field: text", ptr)
            return
        if not isinstance(obj, dict):
            self.err("expected object", ptr)
            return
        t = obj.get("type")
        allowed = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
        if t not in allowed:
            self.err(f"must be one of {list(allowed)}", ptr + "/type")
        text = obj.get("text")
        if not isinstance(text, str):
            self.err("missing required field: text", ptr + "/text")
            return
        if len(text) == 0:
            self.err("must be more than 0 characters", ptr + "/text")
        if limit is not None:
            self.max_len(text, limit, ptr + "/text")

    def confirm(self, obj: Any, ptr: str) -> None:
        if not isinstance(obj, dict):
            self.err("expected object", ptr)
            return
        self.text_obj(obj.get("title"), ptr + "/title", MAX_CONFIRM_TITLE, plain_only=True)
        self.text_obj(obj.get("text"), ptr + "/text", MAX_CONFIRM_TEXT)
        self.text_obj(obj.get("confirm"), ptr + "/confirm", MAX_CONFIRM_BUTTON, plain_only=True)
        self.text_obj(obj.get("deny"), ptr + "/deny", MAX_CONFIRM_BUTTON, plain_only=True)
        style = obj.get("style")
        if style is not None and style not in ("primary", "danger"):
            self.err("must be one of [primary, danger]", ptr + "/style")

    def element(self, el: Any, ptr: str) -> None:
        if not isinstance(el, dict) or not isinstance(el.get("type"), str):
            self.err("missing required field: type", ptr)
            return
        self.max_len(el.get("action_id"), MAX_ACTION_ID, ptr + "/action_id")
        if "confirm" in el:
            self.confirm(el["confirm"], ptr + "/confirm")
        if el["type"] == "button":
            self.text_obj(el.get("text"), ptr + "/text", MAX_BUTTON_TEXT, plain_only=True)
            self.max_len(el.get("value"), MAX_BUTTON_VALUE, ptr + "/value")
            self.max_len(el.get("url"), MAX_URL, ptr + "/url")
            style = el.get("style")
            if style is not None and style not in ("primary", "danger"):
                self.err("must be one of [primary, danger]", ptr + "/style")
        elif el["type"] == "image":
            self.max_len(el.get("image_url"), MAX_URL, ptr + "/image_url")
            if not el.get("alt_text"):
                self.err("missing required field: alt_text", ptr + "/alt_text")

    def block(self, b: Any, i: int) -> None:
        ptr = f"/blocks/{i}"
        if not isinstance(b, dict):
            self.err("expected object", ptr)
            return
        t = b.get("type")
        if t not in KNOWN_BLOCK_TYPES:
            self.err(f"unsupported type: {t}", ptr + "/type")
            return
        self.max_len(b.get("block_id"), MAX_BLOCK_ID, ptr + "/block_id")
        if t == "section":
            if "text" not in b and "fields" not in b:
                self.err("must provide either text or fields", ptr)
            if "text" in b:
                self.text_obj(b["text"], ptr + "/text", MAX_SECTION_TEXT)
            if "fields" in b:
                fields = b["fields"]
                if not isinstance(fields, list) or not fields:
                    self.err("must be a non-empty array", ptr + "/fields")
                else:
                    if len(fields) > MAX_SECTION_FIELDS:
                        self.err(
                            f"must be less than {MAX_SECTION_FIELDS + 1} items", ptr + "/fields"
                        )
                    for j, f in enumerate(fields):
                        self.text_obj(f, f"{ptr}/fields/{j}", MAX_SECTION_FIELD_TEXT)
            if "accessory" in b:
                self.element(b["accessory"], ptr + "/accessory")
        elif t == "header":
            self.text_obj(b.get("text"), ptr + "/text", MAX_HEADER_TEXT, plain_only=True)
        elif t == "context":
            els = b.get("elements")
            if not isinstance(els, list) or not els:
                self.err("must be a non-empty array", ptr + "/elements")
            else:
                if len(els) > MAX_CONTEXT_ELEMENTS:
                    self.err(
                        f"must be less than {MAX_CONTEXT_ELEMENTS + 1} items", ptr + "/elements"
                    )
                for j, el in enumerate(els):
                    eptr = f"{ptr}/elements/{j}"
                    if isinstance(el, dict) and el.get("type") == "image":
                        self.element(el, eptr)
                    else:
                        self.text_obj(el, eptr, None)
        elif t == "actions":
            els = b.get("elements")
            if not isinstance(els, list) or not els:
                self.err("must be a non-empty array", ptr + "/elements")
            else:
                if len(els) > MAX_ACTIONS_ELEMENTS:
                    self.err(
                        f"must be less than {MAX_ACTIONS_ELEMENTS + 1} items", ptr + "/elements"
                    )
                for j, el in enumerate(els):
                    self.element(el, f"{ptr}/elements/{j}")
        elif t == "image":
            self.max_len(b.get("image_url"), MAX_URL, ptr + "/image_url")
            if not b.get("alt_text") and not b.get("slack_file"):
                self.err("missing required field: alt_text", ptr + "/alt_text")
            self.max_len(b.get("alt_text"), MAX_IMAGE_ALT_TEXT, ptr + "/alt_text")
        elif t == "markdown":
            text = b.get("text")
            if not isinstance(text, str) or not text:
                self.err("missing required field: text", ptr + "/text")
            else:
                self.max_len(text, MAX_MARKDOWN_BLOCK_TEXT, ptr + "/text")


def parse_blocks(raw: Any) -> tuple[list | None, str | None]:
    """Blocks arrive as a list (JSON body) or a JSON string (form body)."""
    if raw is None:
        return None, None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None, "invalid_blocks_format"
    if not isinstance(raw, list):
        return None, "invalid_blocks_format"
    return raw, None


def validate_blocks(
    blocks: list, max_json_chars: int = MAX_BLOCKS_JSON_CHARS
) -> tuple[str | None, list[str]]:
    if len(blocks) > MAX_BLOCKS:
        return "invalid_blocks", [
            f"must be less than {MAX_BLOCKS + 1} items [json-pointer:/blocks]"
        ]
    size = len(json.dumps(blocks, separators=(",", ":"), ensure_ascii=False))
    if size > max_json_chars:
        return "msg_blocks_too_long", [f"blocks JSON is {size} characters; limit {max_json_chars}"]
    v = _V()
    seen_ids = set()
    for i, b in enumerate(blocks):
        v.block(b, i)
        if isinstance(b, dict) and b.get("block_id") is not None:
            if b["block_id"] in seen_ids:
                v.err("duplicate block_id", f"/blocks/{i}/block_id")
            seen_ids.add(b["block_id"])
    if v.errors:
        return "invalid_blocks", v.errors
    return None, []


def find_button(blocks: list | None, action_id: str) -> tuple[str, dict] | None:
    """Return (block_id, element) for the interactive element with `action_id`."""
    for b in blocks or []:
        if not isinstance(b, dict):
            continue
        candidates = list(b.get("elements") or []) if b.get("type") == "actions" else []
        if b.get("type") == "section" and isinstance(b.get("accessory"), dict):
            candidates.append(b["accessory"])
        for el in candidates:
            if isinstance(el, dict) and el.get("action_id") == action_id:
                return b.get("block_id") or "", el
    return None
