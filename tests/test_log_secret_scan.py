"""The log scan of tests/conftest.py finds a planted secret wherever spark-bot logs it, and
passes a test that logs none."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INNER_TESTS = """
import logging

from testkit.planted_secrets import HF_TOKEN, SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET


def test_debug_argument():
    logging.getLogger("cluster.watch").debug("token %s", HF_TOKEN)


def test_info_message():
    logging.getLogger("handlers.jobs").info("sent: " + SLACK_BOT_TOKEN)


def test_traceback():
    try:
        raise RuntimeError(SLACK_SIGNING_SECRET)
    except RuntimeError:
        logging.getLogger("bot.app").exception("failed")


def test_clean():
    logging.getLogger("cluster").info("nothing secret")
"""


@pytest.mark.leaks_on_purpose  # the inner tests' records reach this test's own scan too
def test_a_logged_secret_fails_its_test(pytester):
    # The inner run reads its own folder's config, not the project's: pytest-asyncio warns when
    # it leaves the loop scope unset.
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\nasyncio_default_fixture_loop_scope = "function"\n'
    )
    pytester.makeconftest("from tests.conftest import no_planted_secret_in_logs  # noqa: F401\n")
    pytester.makepyfile(INNER_TESTS)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, errors=3)
    result.stdout.fnmatch_lines(["asyncio: *asyncio_default_fixture_loop_scope=function*"])
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_debug_argument*",
            "*a planted secret was logged: HF_TOKEN",
            "*ERROR at teardown of test_info_message*",
            "*a planted secret was logged: SLACK_BOT_TOKEN",
            "*ERROR at teardown of test_traceback*",
            "*a planted secret was logged: SLACK_SIGNING_SECRET",
        ]
    )
