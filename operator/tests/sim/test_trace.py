"""Reading traces in three formats, rescaling, cutting, and the seeded generators."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tailguard.sim import synthetic
from tailguard.sim.trace import Trace, TraceError, load_trace, write_trace


def test_native_csv(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n5.0,100,20\n1.5,30,4\n", encoding="utf-8")
    trace = load_trace(path)
    assert list(trace.arrival_s) == [0.0, 3.5]
    assert list(trace.input_tokens) == [30, 100]


def test_azure_csv_with_seven_fraction_digits(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n",
        encoding="utf-8",
    )
    trace = load_trace(path)
    assert trace.arrival_s[1] == pytest.approx(4.314579, abs=1e-6)
    assert list(trace.output_tokens) == [44, 109]


def test_mooncake_jsonl_in_milliseconds(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [1]},
        {"timestamp": 2500, "input_length": 100, "output_length": 7},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    trace = load_trace(path)
    assert list(trace.arrival_s) == [0.0, 2.5]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a,b,c\n1,2,3\n", "unknown columns"),
        ("arrival_s,input_tokens,output_tokens\n1,x,3\n", ":2:"),
        ('{"timestamp": 1}\n', "unknown columns"),
        ("{not json\n", "not JSON"),
        ("arrival_s,input_tokens,output_tokens\n", "no requests"),
    ],
    ids=["unknown columns", "bad number", "missing keys", "bad json", "empty"],
)
def test_bad_files_name_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(TraceError, match=message):
        load_trace(path)


def test_rate_scale_and_window() -> None:
    trace = Trace.from_columns("t", [0, 10, 20, 30], [1, 2, 3, 4], [5, 6, 7, 8])
    faster = trace.scaled(2.0)
    assert list(faster.arrival_s) == [0, 5, 10, 15]
    cut = faster.window(5, 15)
    assert list(cut.arrival_s) == [0, 5]
    assert list(cut.input_tokens) == [2, 3]
    with pytest.raises(TraceError):
        trace.scaled(0)


def test_lead_in_replays_the_start_before_zero() -> None:
    trace = Trace.from_columns("t", [0, 10, 20, 30], [1, 2, 3, 4], [5, 6, 7, 8])
    lead = trace.lead_in(25)
    assert list(lead.arrival_s) == [-25, -15, -5]
    assert list(lead.input_tokens) == [1, 2, 3]
    assert list(lead.output_tokens) == [5, 6, 7]


def test_write_then_read(tmp_path: Path) -> None:
    trace = synthetic.poisson(5, 60, seed=3)
    write_trace(trace, tmp_path / "x.csv")
    again = load_trace(tmp_path / "x.csv")
    assert len(again) == len(trace)
    assert np.allclose(again.arrival_s, trace.arrival_s - trace.arrival_s[0], atol=1e-5)


@pytest.mark.parametrize(
    ("make", "mean_rate"),
    [
        (lambda: synthetic.poisson(20, 600, seed=1), 20),
        (lambda: synthetic.gamma(20, 600, burstiness=0.5, seed=1), 20),
        (lambda: synthetic.diurnal(20, 600, period_s=600, seed=1), 20),
        (lambda: synthetic.step(10, 30, 600, seed=1), 20),
        (lambda: synthetic.ramp(10, 30, 600, seed=1), 20),
    ],
    ids=["poisson", "gamma", "diurnal", "step", "ramp"],
)
def test_generators_hit_their_mean_rate_and_repeat_with_a_seed(make: object, mean_rate: float) -> None:
    assert callable(make)
    first, second = make(), make()
    assert len(first) == pytest.approx(mean_rate * 600, rel=0.1)
    assert np.array_equal(first.arrival_s, second.arrival_s)
    assert np.all(np.diff(first.arrival_s) >= 0)


def test_mmpp_has_bursts() -> None:
    trace = synthetic.mmpp(10, 50, 3600, seed=2)
    per_minute = trace.arrival_rate(60)
    assert per_minute.max() > 35
    assert per_minute.min() < 15


def test_sharegpt_mix_means() -> None:
    inputs, outputs = synthetic.SHAREGPT.sample(np.random.default_rng(0), 20000)
    assert inputs.mean() == pytest.approx(202, rel=0.15)
    assert outputs.mean() == pytest.approx(179, rel=0.15)
