"""The max-batch lever through the simulator, on the benchmark's workload where the batch cap
binds with TPOT to spare (an 8B replica started at ``--max-num-seqs 32``, a diurnal hour): with
max-batch tuning tailguard meets the target for fewer GPU-hours than without. The lever must earn
its place; once a raise rolling out was sized at the new batch for pods still at the old one, and
the lever then missed the target it exists to meet for less (0.9878)."""

from __future__ import annotations

from tailguard.sim.bench.lever import CASES, run_case


def test_the_lever_meets_the_target_for_less_where_the_cap_binds() -> None:
    case = next(c for c in CASES if c.key == "cap-binds")
    on, off = run_case(case, True, 1), run_case(case, False, 1)
    assert on.changes, "the cap binds: the lever raises it"
    assert not off.changes
    assert on.attainment >= case.slo.goodput, on
    assert off.attainment >= case.slo.goodput, off
    assert on.gpu_hours < off.gpu_hours, (on, off)
