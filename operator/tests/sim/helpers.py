"""Shared checks of the simulator's command-line tools."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tailguard.sim import synthetic
from tailguard.sim.oracle import SloTarget
from tailguard.sim.profiles import get_profile
from tailguard.sim.runner import Scenario, with_lead_in_schedule

#: The lead-in of the through-the-simulator runs: an hour of the same process, observed.
LEAD_S = 3600.0


def steady_70b(seconds: float, *, lead_s: float = LEAD_S, **fields: Any) -> Scenario:
    """A stationary Poisson load of 70 req/s on the 70B replica (seven serve it within a 0.99
    target, six do not) for ``seconds`` after ``lead_s`` of lead-in (an hour unless given), served
    by the lead-in's fleet; ``fields`` override the scenario's."""
    trace = synthetic.poisson(70, seconds, mix=synthetic.CHAT, seed=1, lead_s=lead_s)
    scenario = Scenario(
        trace=trace,
        profile=get_profile("h100x2-llama3-70b-fp8"),
        slo=SloTarget(1.0, 0.1, 0.99),
        seed=1,
        warmup_s=lead_s,
        **fields,
    )
    return with_lead_in_schedule(scenario)


def exits_with_one_line(
    main: Callable[[list[str]], int], argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``main(argv)`` ends in argparse's exit 2 with ``message`` on stderr, no traceback."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
