"""Shared fixtures: the lab of emulated Sparks (fail, never skip), the scan for planted secrets,
and the check that no test leaves a resource unclosed.

A lab test holds the lab exclusively for its whole run (`lab.api.exclusive_use`), so two test
sessions on one machine take turns instead of reconfiguring the lab under each other.
"""

from __future__ import annotations

import gc
import logging

import pytest

from lab.api import LabError, exclusive_use, lab_up
from testkit.planted_secrets import planted_in
from testkit.slack_standin import SlackStandIn


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
    (testkit/planted_secrets.py) in anything the bot sent to Slack; one found fails the test."""
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
    for the planted secrets (testkit/planted_secrets.py); one found fails the test."""
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


# -- unclosed resources -----------------------------------------------------------------------
# pyproject's filterwarnings turns ResourceWarning, and the unraisable exception it becomes in a
# finalizer, into errors: an unclosed socket, file, transport, aiohttp session, connector or
# connection fails the test that was running when it was collected. Below, each test's garbage is
# collected at its end, so a leak in a reference cycle fails the test that made it, not a later
# one; and what asyncio's exception handler logs of an unclosed aiohttp object (its second
# report, when the warning itself is filtered out somewhere) fails the test as well.


def pytest_collection_finish(session):
    # What exists after collection stays: each test's collection below then looks only at what
    # was made since (a full collection of everything imported takes about 0.5 s).
    gc.collect()
    gc.freeze()


class UnclosedLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "nclosed" in message:
            self.messages.append(message.splitlines()[0])


@pytest.fixture(autouse=True)
def no_unclosed_resources(request):
    unclosed = UnclosedLog()
    logger = logging.getLogger("asyncio")
    logger.addHandler(unclosed)
    try:
        yield
        gc.collect()
    finally:
        logger.removeHandler(unclosed)
    if unclosed.messages:
        pytest.fail("unclosed: " + "; ".join(unclosed.messages[:5]), pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A test marked `leaves_unclosed_on_purpose` shows that the check above works: each of its
    phases that failed on an unclosed resource passes, and it fails if none did."""
    report = yield
    if item.get_closest_marker("leaves_unclosed_on_purpose") is None:
        return report
    if report.failed and "nclosed" in str(report.longrepr):
        item.stash[LEAK_CAUGHT] = True
        report.outcome, report.longrepr = "passed", None
    elif call.when == "teardown" and not item.stash.get(LEAK_CAUGHT, False):
        report.outcome = "failed"
        report.longrepr = "this test leaves a resource unclosed on purpose, and nothing caught it"
    return report


LEAK_CAUGHT = pytest.StashKey[bool]()
