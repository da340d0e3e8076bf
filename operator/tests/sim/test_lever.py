"""The max-batch lever benchmark's table and options (the runs themselves are `make bench-lever`)."""

from __future__ import annotations

import pytest

from sim.helpers import exits_with_one_line
from tailguard.sim.bench.lever import CASES, LeverRun, main, table


def test_the_table_sets_tuning_on_and_off_side_by_side_and_marks_a_miss() -> None:
    runs = [
        LeverRun("cap-binds", True, 0.9982, 7.02, 6.30, ((1650.0, 32, 64),)),
        LeverRun("cap-binds", False, 0.9870, 7.77, 6.30, ()),
    ]
    lines = table(runs, {"cap-binds": 0.99}).splitlines()
    assert lines[2] == "| cap-binds | on | 0.9982 | 7.02 | 1.11 | 32 → 64 at 28 min |"
    assert lines[3] == "| cap-binds | off | 0.9870 ! | 7.77 | 1.23 | none |"


def test_every_workload_has_its_own_key() -> None:
    keys = [c.key for c in CASES]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--cases", "nope"], "unknown workload nope"), (["--jobs", "0"], "--jobs must be at least 1")],
)
def test_bad_options_end_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    exits_with_one_line(main, argv, message, capsys)
