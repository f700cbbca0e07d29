"""The suite's planted secrets, defined once: the Slack stand-in hands them out as its tokens and
signing secret, tests put them where a config or the environment holds secrets, and no call the
bot makes to Slack may carry one (tests/conftest.py scans every test that starts a stand-in)."""

SLACK_BOT_TOKEN = "xoxb-7000000001-7000000002-PlantedBotTokenAbCdEf"
SLACK_APP_TOKEN = "xapp-1-A0SPARKAPP-7000000003-PlantedAppTokenAbCdEf"
SLACK_SIGNING_SECRET = "planted0signing0secret0d4c1a7e9b2f"
HF_TOKEN = "hf_PlantedHuggingFaceTokenAbCdEfGhIj"

PLANTED = {
    "SLACK_BOT_TOKEN": SLACK_BOT_TOKEN,
    "SLACK_APP_TOKEN": SLACK_APP_TOKEN,
    "SLACK_SIGNING_SECRET": SLACK_SIGNING_SECRET,
    "HF_TOKEN": HF_TOKEN,
}


def planted_in(text: str) -> list[str]:
    """The names of the planted secrets that appear in `text`."""
    return [name for name, value in PLANTED.items() if value in text]
