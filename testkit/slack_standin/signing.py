"""HTTP-mode helpers: slash-command bodies signed the way Slack signs them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from urllib.parse import urlencode

from slack_sdk.signature import SignatureVerifier

DEFAULT_TEAM_ID = "T0SPARK"
DEFAULT_TEAM_DOMAIN = "sparkteam"
DEFAULT_APP_ID = "A0SPARKAPP"


@dataclass
class SignedRequest:
    body: str
    headers: dict[str, str] = field(default_factory=dict)
    timestamp: str = ""


def slash_command_form(
    *,
    user_id: str,
    channel_id: str,
    text: str,
    command: str = "/spark",
    user_name: str | None = None,
    channel_name: str | None = None,
    response_url: str = "https://hooks.slack.com/commands/T0SPARK/1/xyz",
    trigger_id: str = "1.2.trigger",
    team_id: str = DEFAULT_TEAM_ID,
    team_domain: str = DEFAULT_TEAM_DOMAIN,
    api_app_id: str = DEFAULT_APP_ID,
    token: str = "verification-token-deprecated",
) -> dict[str, str]:
    """The form fields Slack sends for a slash command (HTTP and Socket Mode alike)."""
    return {
        "token": token,
        "team_id": team_id,
        "team_domain": team_domain,
        "channel_id": channel_id,
        "channel_name": channel_name or channel_id.lower(),
        "user_id": user_id,
        "user_name": user_name or user_id.lower(),
        "command": command,
        "text": text,
        "api_app_id": api_app_id,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id,
    }


def sign_body(
    signing_secret: str,
    body: str,
    *,
    timestamp: int | None = None,
    content_type: str = "application/x-www-form-urlencoded",
) -> SignedRequest:
    """Sign `body` with `signing_secret` at `timestamp` (default: now).

    Pass an old timestamp (now - 600) for an expired request, or a different secret
    for an invalid signature.
    """
    ts = str(int(time.time()) if timestamp is None else int(timestamp))
    signature = SignatureVerifier(signing_secret).generate_signature(timestamp=ts, body=body)
    assert signature is not None
    headers = {
        "content-type": content_type,
        "x-slack-request-timestamp": ts,
        "x-slack-signature": signature,
    }
    return SignedRequest(body=body, headers=headers, timestamp=ts)


def build_signed_slash_command(
    signing_secret: str,
    *,
    user_id: str,
    channel_id: str,
    text: str,
    command: str = "/spark",
    timestamp: int | None = None,
    **form_overrides: str,
) -> SignedRequest:
    """A signed slash-command request: `.body` (urlencoded) and `.headers`."""
    form = slash_command_form(
        user_id=user_id, channel_id=channel_id, text=text, command=command, **form_overrides
    )
    return sign_body(signing_secret, urlencode(form), timestamp=timestamp)
