"""A bounded load client for an OpenAI-compatible completions endpoint, measuring what vLLM measures.

Bounded three ways: at most ``requests`` requests, at most ``concurrency`` in flight, and nothing new
started after ``deadline_s`` (each request also has its own timeout). Every request streams, so the
client sees its first token and its last one:

* TTFT = first streamed chunk − send time. vLLM measures from the request's arrival at its frontend,
  so the client's figure is the engine's plus loopback HTTP time (milliseconds).
* TPOT = (last chunk − first chunk) / (output tokens − 1), the definition of
  ``vllm:request_time_per_output_token_seconds``.

``ignore_eos`` makes a random-weight model generate exactly ``max_tokens`` tokens.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx


@dataclass(frozen=True)
class Sample:
    """One request as the client saw it."""

    index: int
    ok: bool
    ttft_s: float = math.nan
    e2e_s: float = math.nan
    output_tokens: int = 0
    prompt_tokens: int = 0
    error: str = ""

    @property
    def tpot_s(self) -> float:
        if not self.ok or self.output_tokens < 2:
            return math.nan
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass
class LoadResult:
    samples: list[Sample] = field(default_factory=list)
    not_started: int = 0
    wall_s: float = 0.0

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.ok]

    @property
    def errors(self) -> list[str]:
        return [f"#{s.index}: {s.error}" for s in self.samples if not s.ok]

    def ttfts(self) -> list[float]:
        return sorted(s.ttft_s for s in self.ok)

    def tpots(self) -> list[float]:
        return sorted(t for s in self.ok if math.isfinite(t := s.tpot_s))

    def summary(self) -> dict[str, float | int]:
        ttft, tpot = self.ttfts(), self.tpots()
        return {
            "requests": len(self.samples),
            "ok": len(self.ok),
            "not_started": self.not_started,
            "wall_s": round(self.wall_s, 2),
            "ttft_p50_s": round(quantile(ttft, 0.5), 4),
            "ttft_p99_s": round(quantile(ttft, 0.99), 4),
            "tpot_p50_s": round(quantile(tpot, 0.5), 5),
            "tpot_p99_s": round(quantile(tpot, 0.99), 5),
        }


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile of sorted ``values`` (nearest rank: an observed value, as a client reports)."""
    if not values:
        return math.nan
    rank = max(1, math.ceil(q * len(values)))
    return values[rank - 1]


def fraction_at_or_below(values: Sequence[float], threshold: float) -> float:
    return sum(1 for v in values if v <= threshold) / len(values) if values else math.nan


async def _one(client: httpx.AsyncClient, index: int, body: dict[str, object], timeout: float) -> Sample:
    sent = time.monotonic()
    first: float | None = None
    last = sent
    tokens = 0
    usage_tokens: int | None = None
    prompt_tokens = 0
    try:
        async with client.stream("POST", "/v1/completions", json=body, timeout=timeout) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")[:300]
                return Sample(index, ok=False, error=f"HTTP {resp.status_code}: {text}")
            async for line in resp.aiter_lines():
                if not line.startswith("data: "):
                    continue
                payload = line[len("data: ") :]
                if payload.strip() == "[DONE]":
                    break
                chunk = json.loads(payload)
                if chunk.get("usage"):
                    usage_tokens = int(chunk["usage"]["completion_tokens"])
                    prompt_tokens = int(chunk["usage"]["prompt_tokens"])
                if not chunk.get("choices"):
                    continue
                now = time.monotonic()
                if first is None:
                    first = now
                last = now
                tokens += 1
    except (httpx.HTTPError, json.JSONDecodeError, KeyError, ValueError) as exc:
        return Sample(index, ok=False, error=f"{type(exc).__name__}: {exc}")
    if first is None:
        return Sample(index, ok=False, error="no token streamed")
    return Sample(
        index,
        ok=True,
        ttft_s=first - sent,
        e2e_s=last - sent,
        output_tokens=usage_tokens if usage_tokens is not None else tokens,
        prompt_tokens=prompt_tokens,
    )


async def run_load(
    base_url: str,
    *,
    model: str,
    prompt: Callable[[int], str],
    requests: int,
    concurrency: int,
    max_tokens: int,
    deadline_s: float,
    request_timeout_s: float = 120,
) -> LoadResult:
    """Send ``requests`` streamed completions, ``concurrency`` at a time, none started after the deadline."""
    result = LoadResult()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)
    t0 = time.monotonic()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=request_timeout_s) as client:

        async def worker() -> None:
            while True:
                try:
                    i = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                if time.monotonic() - t0 > deadline_s:
                    result.not_started += 1
                    continue
                body = {
                    "model": model,
                    "prompt": prompt(i),
                    "max_tokens": max_tokens,
                    "min_tokens": max_tokens,
                    "ignore_eos": True,
                    "temperature": 0.0,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                }
                result.samples.append(await _one(client, i, body, request_timeout_s))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.wall_s = time.monotonic() - t0
    result.samples.sort(key=lambda s: s.index)
    return result
