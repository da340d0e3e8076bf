"""The prefill queue model's yardstick (``python -m tailguard.sim.bench.queue``): one replica of the
simulator's engine against :func:`~tailguard.policy.capacity.ttft_p99` at the same load."""

from __future__ import annotations

import pytest

from sim.helpers import exits_with_one_line
from tailguard.sim import synthetic
from tailguard.sim.bench.queue import QueueRow, decode_batch, main, measure, profile_model, table
from tailguard.sim.profiles import get_profile


def test_on_code_completion_the_model_reads_the_engines_tail_within_a_quarter_or_so() -> None:
    profile = get_profile("h100-llama3-8b")
    rows = [measure(synthetic.CODE, profile, rate, duration_s=600, seed=1) for rate in (2.0, 8.0)]
    assert rows[0].measured_s < rows[1].measured_s
    assert rows[0].modelled_s < rows[1].modelled_s
    for row in rows:
        assert 0.7 <= row.ratio <= 1.1, row


def test_on_long_narrow_prompts_the_model_reads_about_twice_the_tail() -> None:
    # Why the modelled TTFT bound does not size the fleet (``learning.capacity_of``): 32k+ prompts
    # of σ 0.3 queue far less than the model's spread assumes.
    row = measure(synthetic.LONG_CONTEXT, get_profile("h100-llama3.1-8b-128k"), 0.1, duration_s=1200, seed=1)
    assert row.ratio < 0.7, row


def test_the_decode_batch_follows_littles_law() -> None:
    model = profile_model(get_profile("h100-llama3-8b"))
    batch = decode_batch(model, 10.0, 0.0, 100.0)
    assert batch == pytest.approx(10.0 * 100.0 * model.step(batch), rel=1e-6)
    assert decode_batch(model, 10.0, 2000.0, 100.0) > batch  # prompts slow the decodes


def test_the_table_marks_a_saturated_model() -> None:
    lines = table("code", "h100-llama3-8b", [QueueRow(20.0, 1.2, 2.5, float("inf"))]).splitlines()
    assert lines[-1] == "| 20 | 1.20 | 2,500 ms | saturated | - |"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mix", "nope"], "unknown mix nope"),
        (["--profile", "nope"], "unknown profile nope"),
        (["--rates", "1,-2"], "rates must be positive numbers"),
        (["--rates", "a"], "not a list of numbers"),
        (["--duration-s", "1"], "--duration-s must be at least 10"),
    ],
)
def test_bad_options_end_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    exits_with_one_line(main, argv, message, capsys)
