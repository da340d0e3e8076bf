"""The off-benchmark settings: each parses with the simulator's options, the table marks a miss,
and one short run through the same path (the full hours are `make bench-other`)."""

from __future__ import annotations

import pytest

from sim.helpers import exits_with_one_line
from tailguard.sim.bench.other import (
    COMMON,
    SETTINGS,
    OtherRow,
    OtherSetting,
    by_key,
    main,
    run_setting,
    scenario_of,
    table,
    verdict,
)


def test_every_setting_has_its_own_key() -> None:
    keys = [s.key for s in SETTINGS]
    assert len(keys) == len(set(keys)) == 22


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.key)
def test_every_setting_is_a_valid_simulate_command_line(setting: OtherSetting) -> None:
    scenario = scenario_of(setting, seed=1, extra="--duration-s 60 --warmup-s 0")
    assert by_key(setting.key) is setting
    assert scenario.max_replicas == 32
    assert scenario.profile.name == setting.profile
    assert scenario.trace.duration_s <= 60.0


def test_the_common_options_give_the_benchmark_lead_in() -> None:
    scenario = scenario_of(by_key("fp8-chat-poisson"), seed=3, extra="--duration-s 60")
    assert scenario.warmup_s == 3600.0
    assert scenario.seed == 3
    assert "--warmup-s 3600" in COMMON


def test_a_short_run_reports_attainment_and_gpu_hours() -> None:
    row = run_setting(by_key("fp8-chat-poisson"), 1, extra="--duration-s 300 --warmup-s 300")
    assert row.key == "fp8-chat-poisson"
    assert 0.0 <= row.attainment <= 1.0
    assert row.gpu_hours > 0.0
    assert row.bound_gpu_hours > 0.0
    assert row.flat_replicas is None
    assert row.flat_gpu_hours is None


def test_the_table_marks_a_miss_and_shows_the_flat_fleet_when_searched() -> None:
    rows = [
        OtherRow("a", 1, 0.99, 0.9850, 6.16, 1.77, 7, 7.00),
        OtherRow("b", 1, 0.99, 1.0, 3.00, 3.10, None, None),
    ]
    lines = table(rows).splitlines()
    assert lines[0] == "| setting | seed | attainment | GPU-h | × bound | flat fleet | × flat |"
    assert lines[2] == "| a | 1 | 0.9850 ! | 6.16 | 3.48 | 7 (7.00) | 0.88 |"
    assert lines[3] == "| b | 1 | 1.0000 | 3.00 | 0.97 | none within the bounds | - |"
    assert table(rows[1:]).splitlines()[2] == "| b | 1 | 1.0000 | 3.00 | 0.97 |"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--settings", "nope"], "unknown setting nope"),
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["--seeds", "x"], "--seeds must be comma-separated integers"),
    ],
)
def test_bad_options_end_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    exits_with_one_line(main, argv, message, capsys)


def test_the_verdict_counts_the_runs_that_meet_their_target_and_names_the_others() -> None:
    rows = [
        OtherRow("a", 1, 0.99, 0.9850, 6.16, 1.77),
        OtherRow("a", 2, 0.99, 0.9962, 5.68, 1.88),
        OtherRow("b", 1, 0.95, 0.9500, 3.00, 3.10),
    ]
    assert verdict(rows) == "2 of 3 runs meet their goodput target; under it: a (seed 1, 0.9850)"
    assert verdict(rows[1:]) == "2 of 2 runs meet their goodput target"
