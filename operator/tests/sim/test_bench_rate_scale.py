"""``python -m tailguard.sim.bench --rate-scale``: the benchmark's traces at other rates."""

from __future__ import annotations

import pytest

from tailguard.sim.bench import by_key
from tailguard.sim.bench.runs import main, scenario_of


def test_a_scaled_scenario_carries_the_same_requests_at_k_times_the_rate() -> None:
    plain = scenario_of(by_key("poisson"), 1, 600.0)
    doubled = scenario_of(by_key("poisson"), 1, 600.0, rate_scale=2.0)
    assert len(doubled.trace) == len(plain.trace)
    assert doubled.trace.duration_s == pytest.approx(plain.trace.duration_s / 2.0, rel=1e-3)
    assert doubled.warmup_s == pytest.approx(300.0), "the lead-in is compressed with the trace"
    assert doubled.trace.before is not None
    assert plain.trace.before is not None
    assert len(doubled.trace.before) == len(plain.trace.before)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--rate-scale", "-1"], "--rate-scale must be a positive number"),
        (["--rate-scale", "0"], "--rate-scale must be a positive number"),
        (["--rate-scale", "nan"], "--rate-scale must be a positive number"),
        (["--rate-scale", "2", "--sweep"], "not --frontier or --sweep"),
        (["--rate-scale", "2", "--frontier"], "not --frontier or --sweep"),
    ],
    ids=["negative", "zero", "nan", "with-sweep", "with-frontier"],
)
def test_a_bad_rate_scale_is_a_one_line_error(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--no-speed", "--traces", "poisson"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--seeds", "1,x", "--traces", "poisson"], "--seeds must be comma-separated integers"),
        (["--seeds", ",", "--traces", "poisson"], "--seeds names no seed"),
        (["--traces", "poisson,nope"], "unknown traces nope"),
        (["--traces", "poisson", "--policies", "tailguard,nope"], "unknown policies nope"),
        (["--traces", "poisson", "--jobs", "0"], "--jobs must be at least 1"),
        (["--traces", "poisson", "--out", "/dev/null/bench"], "--out /dev/null/bench: cannot create"),
        (["--traces", "poisson", "--plots", "/dev/null/img"], "--plots /dev/null/img: cannot create"),
    ],
    ids=["not-a-seed", "no-seed", "unknown-trace", "unknown-policy", "no-jobs", "bad-out", "bad-plots"],
)
def test_bad_options_are_one_line_errors_before_any_run(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--no-speed"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert says in err, err
    assert "Traceback" not in err
