"""One replica under benchmark conditions against published figures (calibration.md).

Each check cites its row; the tolerance is ±25% unless a row's own text says otherwise.
"""

from __future__ import annotations

import pytest

from tailguard.sim.calibrate import closed_loop, poisson_bench, saturation
from tailguard.sim.profiles import get_profile
from tailguard.sim.synthetic import DECODE_HEAVY, PREFILL_HEAVY, SHAREGPT, TokenMix

TOLERANCE = 0.25


def near(measured: float, published: float, tolerance: float = TOLERANCE) -> bool:
    return abs(measured / published - 1.0) <= tolerance


H100 = get_profile("h100-llama3-8b")
A100 = get_profile("a100-llama3-8b")
H100_FP8 = get_profile("h100-llama3-8b-fp8")


@pytest.mark.parametrize(("rate", "tpot_ms"), [(2, 8.0), (8, 9.0), (16, 11.0), (32, 13.5)])
def test_row_a_tpot_at_fixed_rates(rate: float, tpot_ms: float) -> None:
    """Row A: 1×H100, Llama-3-8B, ShareGPT — TPOT ≈ 8 / 9 / 11 / 13.5 ms at 2 / 8 / 16 / 32 QPS."""
    result = poisson_bench(H100, rate, SHAREGPT, requests=500)
    assert near(result.tpot_mean * 1e3, tpot_ms), result


def test_row_a_ttft_stays_under_100_ms_up_to_32_qps() -> None:
    """Row A: TTFT < 0.1 s up to 32 QPS (mean, as the post plots it)."""
    assert poisson_bench(H100, 32, SHAREGPT, requests=500).ttft_mean < 0.1


def test_row_a_saturation() -> None:
    """Row A: saturation ≈ 37 req/s with all requests sent at once."""
    assert near(saturation(H100, SHAREGPT, requests=800).throughput, 37.0)


@pytest.mark.parametrize(("rate", "tpot_ms"), [(2, 8.0), (16, 12.0), (32, 24.0)])
def test_row_a_prime_decode_heavy_tpot(rate: float, tpot_ms: float) -> None:
    """Row A′: decode-heavy 462 in / 256 out — TPOT ≈ 8 / 12 / 24 ms at 2 / 16 / 32 QPS."""
    assert near(poisson_bench(H100, rate, DECODE_HEAVY, requests=500).tpot_mean * 1e3, tpot_ms)


def test_row_a_prime_saturation() -> None:
    """Row A′: ≈ 31 req/s, TPOT ≈ 44 ms with requests unlimited."""
    result = saturation(H100, DECODE_HEAVY, requests=800)
    assert near(result.throughput, 31.0)
    assert near(result.tpot_mean * 1e3, 44.0)


def test_row_a_double_prime_prefill_heavy_saturation() -> None:
    """Row A″: prefill-heavy 462 in / 16 out — ≈ 59 req/s."""
    assert near(saturation(H100, PREFILL_HEAVY, requests=800).throughput, 59.0)


@pytest.mark.parametrize(("rate", "tpot_ms"), [(2, 13.0), (4, 15.0), (8, 18.0), (16, 26.0), (32, 40.0)])
def test_row_b_a100_tpot(rate: float, tpot_ms: float) -> None:
    """Row B: 1×A100, Llama-3-8B, ShareGPT — TPOT ≈ 13 / 15 / 18 / 26 / 40 ms at 2 / 4 / 8 / 16 / 32 QPS.

    32 QPS is past the row's own saturation (≈ 19 req/s): the figure is a transient of a
    finite run, so the run sends 600 requests as a benchmark of that size would.
    """
    assert near(poisson_bench(A100, rate, SHAREGPT, requests=600).tpot_mean * 1e3, tpot_ms)


def test_row_b_saturation() -> None:
    """Row B: ≈ 19 req/s at most."""
    assert near(saturation(A100, SHAREGPT, requests=800).throughput, 19.0)


# Row F does not state its prompt and output lengths; 1000 / 1000, NIM's usual benchmark case,
# is assumed (the fitted profile reproduces the ITL column with it).
NIM = TokenMix("nim-1000-1000", 1000, 1000)


@pytest.mark.parametrize(
    ("concurrency", "itl_ms"),
    [(1, 4.6), (5, 4.6), (25, 5.2), (50, 5.9), (100, 7.6), (150, 9.8), (200, 12.7), (250, 16.1)],
)
def test_row_f_inter_token_latency(concurrency: int, itl_ms: float) -> None:
    """Row F: Llama-3.1-8B FP8 on H100 — ITL 4.6 … 16.1 ms at concurrency 1 … 250."""
    result = closed_loop(H100_FP8, concurrency, NIM, requests=max(150, 3 * concurrency))
    assert near(result.itl_mean * 1e3, itl_ms), result


@pytest.mark.parametrize(("concurrency", "ttft_ms"), [(1, 10.0), (5, 17.0), (50, 67.0), (100, 120.0)])
def test_row_f_time_to_first_token(concurrency: int, ttft_ms: float) -> None:
    """Row F: TTFT 10 / 17 / 67 / 120 ms at concurrency 1 / 5 / 50 / 100.

    The row's other points (25, and 150 to 250) sit 40–50% above the model, which grows TTFT
    only through the prefill budget the decodes leave; docs/simulator.md records the gap (the
    benchmark's own frontend queueing is not modelled).
    """
    result = closed_loop(H100_FP8, concurrency, NIM, requests=max(150, 3 * concurrency))
    assert near(result.ttft_mean * 1e3, ttft_ms), result
