"""A copy's progress arithmetic (cluster/operations/transfer.py), on a clock the test moves."""

from __future__ import annotations

import pytest

from cluster.events import Transfer
from cluster.operations.transfer import TransferMeter, describe, duration, size

MiB = 1024 * 1024


class Clock:
    def __init__(self) -> None:
        self.at = 100.0

    def __call__(self) -> float:
        return self.at


def test_rate_and_time_left_come_from_the_recent_window_not_the_whole_copy():
    clock = Clock()
    meter = TransferMeter(1000 * MiB, every_s=1, window_s=5, clock=clock)
    for _ in range(10):  # 10 s at 10 MiB/s
        clock.at += 1
        meter.add(10 * MiB)
    for _ in range(10):  # then 10 s at 50 MiB/s
        clock.at += 1
        meter.add(50 * MiB)
    figures = meter.figures()
    assert figures.bytes_done == 600 * MiB
    assert figures.rate_bps == pytest.approx(50 * MiB, rel=0.01)  # not the 30 MiB/s average
    assert figures.eta_s == pytest.approx(8, rel=0.01)  # 400 MiB left at 50 MiB/s


def test_reports_are_due_at_most_every_interval_however_many_chunks_pass():
    clock = Clock()
    meter = TransferMeter(None, every_s=1, clock=clock)
    due = []
    for _ in range(100):  # 100 chunks in 2.5 s
        clock.at += 0.025
        due.append(meter.add(64 * 1024))
    assert sum(due) == 2
    assert len(meter._samples) <= 25  # a handful of samples kept, not one per chunk


def test_without_a_size_or_before_any_time_has_passed_nothing_is_made_up():
    clock = Clock()
    meter = TransferMeter(0, clock=clock)
    assert meter.figures() == Transfer(bytes_done=0, bytes_total=None, rate_bps=None, eta_s=None)
    clock.at += 30  # the engine takes its time before the first byte: not counted in the rate
    meter.add(MiB)
    assert meter.figures().rate_bps is None
    clock.at += 2
    meter.add(4 * MiB)
    assert meter.figures().eta_s is None and meter.figures().rate_bps == pytest.approx(2.5 * MiB)


def test_a_tarball_larger_than_the_images_size_shows_99_percent_and_no_time_left():
    clock = Clock()
    meter = TransferMeter(100 * MiB, clock=clock)
    meter.add(20 * MiB)
    clock.at += 1
    meter.add(100 * MiB)
    figures = meter.figures()
    assert figures.eta_s is None
    assert describe(figures) == "120.0 MiB of ~100.0 MiB (99%), 120.0 MiB/s"


@pytest.mark.parametrize(
    ("figures", "text"),
    [
        (
            Transfer(
                bytes_done=3 * 1024 * MiB, bytes_total=12 * 1024 * MiB, rate_bps=112 * MiB, eta_s=82
            ),
            "3.0 GiB of ~12.0 GiB (25%), 112.0 MiB/s, about 1 min 22 s left",
        ),
        (Transfer(bytes_done=512), "512 B"),
        (Transfer(bytes_done=2048, rate_bps=1024.0), "2.0 KiB, 1.0 KiB/s"),
    ],
)
def test_the_figures_read_as_a_person_would_say_them(figures, text):
    assert describe(figures) == text


def test_sizes_and_durations():
    assert [size(n) for n in (0, 1023, 1024, 5 * MiB, 3 * 1024**4)] == [
        "0 B",
        "1023 B",
        "1.0 KiB",
        "5.0 MiB",
        "3072.0 GiB",
    ]
    assert [duration(s) for s in (0.4, 59, 61, 3599, 3660 * 2)] == [
        "0 s",
        "59 s",
        "1 min 01 s",
        "59 min 59 s",
        "2 h 02 min",
    ]
