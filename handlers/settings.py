"""The bot's own settings (access, commands, jobs, store): validated once, at the edge.

They sit beside `cluster:` in the YAML root (bot/config.py). Slack and terminal settings live
in bot/; nothing here knows a chat.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Slack IDs, never names (names change and can be spoofed): users U…/W…, channels C…/G…/D….
UserId = Annotated[str, Field(pattern=r"^(\*|[UW][A-Z0-9]{2,30})$")]
ChannelId = Annotated[str, Field(pattern=r"^(\*|[CGD][A-Z0-9]{2,30})$")]

OverrideName = Literal["max_model_len", "gpu_memory_utilization", "max_num_seqs"]
PresetName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AccessLevel(_Model):
    """Who may run a level's commands, and where: both lists must match ("*" matches any
    channel, but a direct message only with `direct_messages`)."""

    users: list[UserId] = Field(default_factory=list, description='Slack user IDs ("*": anyone)')
    channels: list[ChannelId] = Field(
        default_factory=list,
        description='Slack channel IDs ("*": any channel, not a direct message)',
    )
    direct_messages: bool = Field(False, description="also in direct messages with the bot")


class AccessConfig(_Model):
    """read: status, verify, recipes, logs, diag, help. operate: up, down, bench, fabric-test,
    sync-image, sync-model, drop-caches, cancel (and read).

    Least privilege by default: anyone may read, but only in the channels the config names;
    nobody may operate until users and channels are listed."""

    read: AccessLevel = Field(
        AccessLevel(users=["*"]),
        description="who may run status, verify, recipes, logs, diag, help, and where",
    )
    operate: AccessLevel = Field(
        AccessLevel(),
        description="who may run up, down, bench, fabric-test, sync-image, sync-model, drop-caches, "
        "cancel (and read), and where",
    )


class Bound(_Model):
    min: float = Field(description="the least value `/spark up` may set")
    max: float = Field(description="the greatest value `/spark up` may set")

    @model_validator(mode="after")
    def _ordered(self) -> Bound:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        return self


class CommandsConfig(_Model):
    """What `/spark up` may change (only the listed serve settings, within their bounds), the
    limits of the other commands, and how long a confirmation can be answered."""

    overrides: dict[OverrideName, Bound] = Field(
        default_factory=dict,
        description="the serve settings `/spark up key=value` may change, each with its bounds",
    )
    presets: dict[PresetName, dict[OverrideName, float]] = Field(
        default_factory=dict, description="named sets of overrides: `/spark up NAME`"
    )
    logs_max_lines: int = Field(
        500, ge=1, le=5000, description="the most lines `/spark logs` shows"
    )
    bench_max_concurrency: int = Field(
        64, ge=1, le=1024, description="the highest concurrency `/spark bench` may sweep to"
    )
    bench_max_tokens: int = Field(
        2048, ge=2, le=32768, description="the most tokens a `/spark bench` request may ask for"
    )
    confirm_within: float = Field(
        600,
        ge=10,
        le=86400,
        description=(
            "seconds a confirmation button (down, replace) can be answered; once, by the user asked"
        ),
    )

    @model_validator(mode="after")
    def _presets_within_bounds(self) -> CommandsConfig:
        for name, values in self.presets.items():
            for key, value in values.items():
                bound = self.overrides.get(key)
                if bound is None:
                    raise ValueError(f"preset {name}: {key} is not listed under commands.overrides")
                if not bound.min <= value <= bound.max:
                    raise ValueError(
                        f"preset {name}: {key}={value} is outside {bound.min}..{bound.max}"
                    )
        return self


class JobsConfig(_Model):
    update_interval: float = Field(
        1.5, ge=0, le=60, description="least seconds between two edits of a job's parent message"
    )
    watch_health_interval: float = Field(
        30, gt=0, le=3600, description="seconds between two /health checks of the watch"
    )
    inline_log_lines: int = Field(15, ge=1, le=100, description="log lines shown in a thread reply")
    delivery_timeout: float = Field(
        180,
        ge=5,
        le=3600,
        description=(
            "seconds the bot keeps trying to deliver a job's messages while the chat takes none of them "
            "(Slack answering 429 or failing); then it gives them up and tells the requester privately how "
            "the job ended"
        ),
    )


class StoreConfig(_Model):
    path: Path = Field(
        Path("spark-bot.db"), description="SQLite file: jobs, lock, audit, bench results"
    )
    lease: float = Field(
        30,
        ge=3,
        le=3600,
        description=(
            "seconds the bot's registration and its cluster lock last unless renewed (every third of it); "
            "another bot on the same file may take over only once they have expired"
        ),
    )


class BotSettings(_Model):
    access: AccessConfig = AccessConfig()
    commands: CommandsConfig = CommandsConfig()
    jobs: JobsConfig = JobsConfig()
    store: StoreConfig = StoreConfig()


Level = Literal["read", "operate"]
