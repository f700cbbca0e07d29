"""A faithful local Slack for the test suite (Web API, Socket Mode, response_url, uploads).

from testkit.slack_standin import SlackStandIn

async with SlackStandIn() as slack:
    client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    app = AsyncApp(client=client, signing_secret=slack.signing_secret)
    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    ack = await slack.send_slash_command("U0ALICE", "C0SPARKOPS", "launch")
"""

from .blocks import validate_blocks
from .conversations import IM, MPIM, PRIVATE, PUBLIC, Conversation
from .server import (
    ACK_TIMEOUT,
    SLACK_ACK_DEADLINE,
    Ack,
    AckTimeout,
    Call,
    HttpResult,
    ResponseUrlPost,
    SlackStandIn,
    SocketConnection,
)
from .signing import SignedRequest, build_signed_slash_command, sign_body, slash_command_form

__all__ = [
    "ACK_TIMEOUT",
    "IM",
    "MPIM",
    "PRIVATE",
    "PUBLIC",
    "SLACK_ACK_DEADLINE",
    "Ack",
    "AckTimeout",
    "Call",
    "Conversation",
    "HttpResult",
    "ResponseUrlPost",
    "SignedRequest",
    "SlackStandIn",
    "SocketConnection",
    "build_signed_slash_command",
    "sign_body",
    "slash_command_form",
    "validate_blocks",
]
