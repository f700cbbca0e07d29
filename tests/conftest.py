"""Shared fixtures: the lab of emulated Sparks (fail, never skip).

A lab test holds the lab exclusively for its whole run (`lab.api.exclusive_use`), so two test
sessions on one machine take turns instead of reconfiguring the lab under each other.
"""

from __future__ import annotations

import logging

import pytest

from lab.api import LabError, exclusive_use, lab_up
from tests.secrets import planted_in
from tests.slack_standin import SlackStandIn


def bring_up_lab(**options):
    try:
        return lab_up(**options)
    except LabError as error:
        pytest.fail(f"the lab could not come up: {error}", pytrace=False)


@pytest.fixture
def lab():
    """A 2-node lab with workers on the management network (restored if a test changed it)."""
    with exclusive_use():
        yield bring_up_lab(nodes=2)


@pytest.fixture
def relab():
    """For tests that reconfigure the lab: yields the bring-up function, restores 2 nodes after."""
    with exclusive_use():
        yield bring_up_lab
        bring_up_lab(nodes=2)


@pytest.fixture
async def slack():
    """A fresh Slack stand-in (Web API + Socket Mode) on loopback."""
    async with SlackStandIn() as stand_in:
        yield stand_in


@pytest.fixture(autouse=True)
def no_planted_secret_reaches_slack(request, monkeypatch):
    """Every Slack stand-in a test starts is scanned after it for the planted secrets
    (tests/secrets.py) in anything the bot sent to Slack; one found fails the test."""
    started: list[SlackStandIn] = []
    start = SlackStandIn.start

    async def recorded(self):
        started.append(self)
        return await start(self)

    monkeypatch.setattr(SlackStandIn, "start", recorded)
    yield
    if request.node.get_closest_marker("leaks_on_purpose"):
        return
    leaks = [
        f"{name} in {where}"
        for stand_in in started
        for where, text in stand_in.sent_by_apps()
        for name in planted_in(text)
    ]
    if leaks:
        pytest.fail("a planted secret reached Slack: " + "; ".join(leaks[:10]), pytrace=False)


class _Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []
        self._formatter = logging.Formatter()

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self._formatter.formatException(record.exc_info)
        if len(self.texts) < 100_000:
            self.texts.append(text)


_OUR_LOGGERS = ("bot", "handlers", "cluster", "demo")


@pytest.fixture(autouse=True)
def no_planted_secret_in_logs(request):
    """Everything spark-bot logs during a test, at every level and with its tracebacks, is scanned
    for the planted secrets (tests/secrets.py); one found fails the test."""
    recorder = _Recorder()
    root = logging.getLogger()
    root.addHandler(recorder)
    ours = [logging.getLogger(name) for name in _OUR_LOGGERS]
    levels = [logger.level for logger in ours]
    for logger in ours:
        logger.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.removeHandler(recorder)
        for logger, level in zip(ours, levels, strict=True):
            logger.setLevel(level)
    if request.node.get_closest_marker("leaks_on_purpose"):
        return
    leaks = sorted({name for text in recorder.texts for name in planted_in(text)})
    if leaks:
        pytest.fail("a planted secret was logged: " + ", ".join(leaks), pytrace=False)
