"""Docker's timestamps (RFC 3339 with up to nanoseconds, trailing zeros dropped) as datetimes."""

from __future__ import annotations

from datetime import datetime

_NEVER = "0001-01-01T00:00:00Z"  # Docker's "not yet" (StartedAt of a created container)


def parse_docker_timestamp(stamp: str | None) -> datetime | None:
    """`2026-11-30T07:01:38.1234Z` -> an aware datetime (to microseconds); None if not one."""
    if not stamp or stamp == _NEVER or not stamp.endswith("Z") or "T" not in stamp:
        return None
    whole, _, fraction = stamp[:-1].partition(".")
    try:
        return datetime.fromisoformat(f"{whole}.{(fraction or '0')[:6]:0<6}+00:00")
    except ValueError:
        return None
