"""``tailguard simulate --schedule``: declared windows in the simulator, read against --start-at."""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path

import pytest

from tailguard.policy import ScheduleWindow
from tailguard.sim import cli


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


GOOD: list[tuple[str, ScheduleWindow]] = [
    (
        "peak=0 9 * * MON-FRI,8h,6,Europe/Berlin",
        ScheduleWindow("peak", "0 9 * * MON-FRI", 28800.0, 6, "Europe/Berlin"),
    ),
    ("night=0 22 * * *,4h,3", ScheduleWindow("night", "0 22 * * *", 14400.0, 3, "UTC")),
    (" spaced = */30 * * * * , 10m , 2 ", ScheduleWindow("spaced", "*/30 * * * *", 600.0, 2, "UTC")),
]


@pytest.mark.parametrize(("text", "window"), GOOD)
def test_schedules_parse(text: str, window: ScheduleWindow) -> None:
    assert cli.parse_schedule(text) == window


BAD: list[tuple[str, str]] = [
    ("0 9 * * *,8h,6", "--schedule must be NAME=CRON,DURATION,MIN[,TZ], got '0 9 * * *,8h,6'"),
    ("peak=0 9 * * *,8h", "--schedule must be NAME=CRON,DURATION,MIN[,TZ], got 'peak=0 9 * * *,8h'"),
    (
        "peak=0 9 * *,8h,6",
        "--schedule peak: expected 5 fields (minute hour day-of-month month day-of-week), got 4 in '0 9 * *'",
    ),
    ("peak=0 9 * * *,8d,6", "--schedule peak: '8d' is not a duration such as 2h, 30m or 1h30m"),
    (
        "peak=0 9 * * *,8h,6,Mars/Base",
        "--schedule peak: unknown time zone 'Mars/Base' (an IANA name such as Europe/Berlin)",
    ),
    ("peak=0 9 * * *,8h,0", "--schedule peak: MIN must be a whole number of at least 1, got '0'"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_schedules_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cli.parse_schedule(text)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("--schedule", "peak=0 9 * * *,1h,2"),
            "error: --schedule needs --start-at, the wall-clock time of the trace's start",
        ),
        (
            ("--schedule", "peak=0 9 * * *,1h,2", "--start-at", "2025-06-02T09:00"),
            "error: --start-at needs a UTC offset (e.g. 2025-06-02T07:00:00+02:00), got '2025-06-02T09:00'",
        ),
        (("--start-at", "monday"), "error: --start-at must be an ISO 8601 time, got 'monday'"),
        (
            ("--schedule", "peak=0 9 * * *,1h,40", "--start-at", "2025-06-02T09:00Z"),
            "error: a --schedule MIN must not exceed --max-replicas",
        ),
    ],
)
def test_bad_clock_options_exit_with_usage(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse("--synthetic", "poisson", "--rate", "2", "--duration-s", "120", "--policies", "tailguard", "--no-progress", *argv)  # fmt: skip
    assert cli.run(args) == cli.EXIT_USAGE
    assert capsys.readouterr().err.strip() == message


def test_a_window_holds_tailguard_at_its_floor_from_its_wall_clock_start(tmp_path: Path) -> None:
    # The trace starts at 08:55 Berlin time; the window opens at 09:00 (300 s in) for 5 minutes.
    args = parse(
        "--synthetic", "poisson", "--rate", "2", "--duration-s", "900", "--max-replicas", "8",
        "--policies", "tailguard", "--warmup-s", "0", "--no-progress", "--no-plots", "--out", str(tmp_path),
        "--schedule", "peak=0 9 * * *,5m,4,Europe/Berlin", "--start-at", "2025-06-02T08:55:00+02:00",
    )  # fmt: skip
    assert cli.run(args) == 0
    with (tmp_path / "timeline.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["policy"] == "tailguard"]
    desired = {float(r["time_s"]): int(r["desired"]) for r in rows}
    before = [n for t, n in desired.items() if t < 300]
    during = [n for t, n in desired.items() if 320 <= t < 600]
    assert before
    assert max(before) < 4
    assert during
    assert min(during) >= 4
    # Once it closes, the load decides again.
    after = [n for t, n in desired.items() if t >= 660]
    assert after
    assert min(after) < 4
