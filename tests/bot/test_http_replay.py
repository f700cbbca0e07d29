"""HTTP mode acts only on requests Slack signed, each once: one unsigned, stale or forged is
refused (401) before Bolt and audited; the same signed request sent again is refused
(401, audited), and Slack's own retry of a request (re-signed, `X-Slack-Retry-Num`) gets the
first answer without running the command again. The bot runs on the Slack stand-in with the
handler doubles' cluster (no lab)."""

from __future__ import annotations

import re
import time
from urllib.parse import urlencode

import aiohttp
import pytest
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from bot.replay import AUDITED_PER_MINUTE, WINDOW, Refusal, ReplayGuard
from testkit.doubles import CLUSTER, ScriptedControllers
from testkit.slack_bot import ALICE, CH, settings, slack_bot
from testkit.slack_standin.signing import SignedRequest, sign_body, slash_command_form

pytestmark = pytest.mark.timeout(30)

RETRY = {"x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout"}


def slash_body(text: str, trigger_id: str) -> str:
    return urlencode(
        slash_command_form(user_id=ALICE, channel_id=CH, text=text, trigger_id=trigger_id)
    )


async def post(
    url: str, signed: SignedRequest, extra: dict[str, str] | None = None
) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            url, data=signed.body.encode(), headers={**signed.headers, **(extra or {})}
        ) as response,
    ):
        return response.status, await response.text()


async def test_a_replayed_request_is_refused_and_audited(slack, tmp_path):
    controllers = ScriptedControllers(verify=[])
    async with slack_bot(
        slack, CLUSTER, settings(tmp_path), http=True, controllers=controllers
    ) as bot:
        url = f"http://127.0.0.1:{bot.port}/slack/events"
        signed = sign_body(slack.signing_secret, slash_body("verify", "1.100.trigger"))
        first = await post(url, signed)
        await (
            bot.dispatcher.idle()
        )  # the verify job has ended: a second run would not be refused as busy
        replayed = await post(url, signed)
        await bot.dispatcher.idle()
        trail = await bot.dispatcher.store.audit_trail()
    assert first[0] == 200 and replayed[0] == 401
    assert [call.operation for call in controllers.calls].count("verify") == 1
    assert [
        (a["user"], a["channel"], a["command"], a["outcome"])
        for a in trail
        if "replayed" in a["outcome"]
    ] == [
        (
            ALICE,
            CH,
            "/spark verify",
            "refused: a replayed HTTP request (its signature was already used)",
        )
    ]


async def test_unsigned_stale_and_forged_requests_are_refused_before_bolt_and_audited(
    slack, tmp_path
):
    controllers = ScriptedControllers(verify=[])
    async with slack_bot(
        slack, CLUSTER, settings(tmp_path), http=True, controllers=controllers
    ) as bot:
        url = f"http://127.0.0.1:{bot.port}/slack/events"
        signed = sign_body(slack.signing_secret, slash_body("verify", "1.300.trigger"))
        unsigned = SignedRequest(signed.body, {"content-type": signed.headers["content-type"]})
        no_signature = SignedRequest(
            signed.body, {k: v for k, v in signed.headers.items() if k != "x-slack-signature"}
        )
        stale = sign_body(
            slack.signing_secret,
            slash_body("verify", "1.301.trigger"),
            timestamp=int(time.time()) - 600,
        )
        forged = sign_body("not-the-secret", slash_body("verify", "1.302.trigger"))
        answers = [await post(url, request) for request in (unsigned, no_signature, stale, forged)]
        genuine = await post(url, signed)
        await bot.dispatcher.idle()
        trail = await bot.dispatcher.store.audit_trail()
    assert [status for status, _ in answers] == [401, 401, 401, 401] and genuine[0] == 200
    assert [call.operation for call in controllers.calls].count("verify") == 1, (
        "only the signed one ran"
    )
    refused = [
        (
            a["user"],
            a["channel"],
            a["command"],
            re.sub(r"signed 60\d s ago", "signed 600 s ago", a["outcome"]),
        )
        for a in trail
        if a["outcome"].startswith("refused")
    ]
    assert sorted(refused) == sorted(
        [
            (
                ALICE,
                CH,
                "/spark verify",
                "refused: an HTTP request without a signature (sender unverified)",
            ),
            (
                ALICE,
                CH,
                "/spark verify",
                "refused: an HTTP request without a signature (sender unverified)",
            ),
            (
                ALICE,
                CH,
                "/spark verify",
                "refused: a stale HTTP request (signed 600 s ago; sender unverified)",
            ),
            (
                ALICE,
                CH,
                "/spark verify",
                "refused: a forged HTTP request (its signature does not match; sender unverified)",
            ),
        ]
    )


async def test_a_flood_of_refusals_is_audited_within_a_bound_and_counted():
    clock = [1_000_000.0]
    audited: list[Refusal] = []
    guard = ReplayGuard("secret", on_refused=audited.append, clock=lambda: clock[0])

    async def dispatch(request: AsyncBoltRequest) -> BoltResponse:
        raise AssertionError("a forged request reached Bolt")

    forged = sign_body(
        "not-the-secret", slash_body("help", "1.400.trigger"), timestamp=int(clock[0])
    )
    for _ in range(AUDITED_PER_MINUTE + 40):
        response = await guard.handle(
            AsyncBoltRequest(body=forged.body, headers=forged.headers), dispatch
        )
        assert response.status == 401
    assert len(audited) == AUDITED_PER_MINUTE
    clock[0] += 61
    forged = sign_body(
        "not-the-secret", slash_body("help", "1.401.trigger"), timestamp=int(clock[0])
    )
    await guard.handle(AsyncBoltRequest(body=forged.body, headers=forged.headers), dispatch)
    assert len(audited) == AUDITED_PER_MINUTE + 1
    assert audited[-1].why.endswith("(40 earlier refusal(s) not audited: more than 60 a minute)")


async def test_a_slack_retry_gets_the_first_answer_and_runs_nothing_again(slack, tmp_path):
    controllers = ScriptedControllers(verify=[])
    async with slack_bot(
        slack, CLUSTER, settings(tmp_path), http=True, controllers=controllers
    ) as bot:
        url = f"http://127.0.0.1:{bot.port}/slack/events"
        now = int(time.time())
        for text, trigger in [("verify", "1.200.trigger"), ("help", "1.201.trigger")]:
            body = slash_body(text, trigger)
            first = await post(url, sign_body(slack.signing_secret, body, timestamp=now))
            await bot.dispatcher.idle()
            retry = sign_body(
                slack.signing_secret, body, timestamp=now + 2
            )  # Slack signs a retry anew
            again = await post(url, retry, RETRY)
            await bot.dispatcher.idle()
            assert again == first and first[0] == 200, text
            if text == "help":
                assert "/spark up" in again[1], "the retry is answered as the first request was"
            assert (await post(url, retry, RETRY))[0] == 401, "a retry replayed is a replay"
        different = await post(
            url, sign_body(slack.signing_secret, slash_body("verify", "1.202.trigger"))
        )
        await bot.dispatcher.idle()
    assert different[0] == 200
    assert [call.operation for call in controllers.calls].count("verify") == 2, (
        "once per payload Slack sent"
    )


async def test_what_the_guard_remembers_expires_and_is_bounded():
    clock = [1_000_000.0]
    guard = ReplayGuard("secret", on_refused=lambda refusal: None, limit=2, clock=lambda: clock[0])
    runs: list[str] = []

    async def dispatch(request: AsyncBoltRequest) -> BoltResponse:
        runs.append(request.body["trigger_id"])
        return BoltResponse(status=200, body="")

    async def deliver(trigger: str) -> int:
        """Slack (re-)sending the payload `trigger`, signed now."""
        signed = sign_body("secret", slash_body("help", trigger), timestamp=int(clock[0]))
        return (
            await guard.handle(AsyncBoltRequest(body=signed.body, headers=signed.headers), dispatch)
        ).status

    await deliver("a")
    clock[0] += WINDOW
    await deliver("a")  # a retry within Slack's retry schedule: not run again
    clock[0] += WINDOW + 1
    await deliver("a")  # long after: a payload no retry would bring, run as new
    assert runs == ["a", "a"]
    for trigger in ["b", "c", "d", "b", "d"]:  # at most 2 remembered: "b" was let go for "d"
        await deliver(trigger)
    assert runs == ["a", "a", "b", "c", "d", "b"]
