"""A bounded load generator for the kind tier, run in a pod of the cluster (standard library only).

``python load.py URL MODEL --workers N --duration S --max-requests M --max-tokens T``: N closed-loop
workers send streamed completions to URL (the InferenceService's Service, so kube-proxy spreads the
connections over the ready replicas) until S seconds have passed or M requests were sent, whichever
comes first; every request has its own timeout. At the end it prints one JSON line: requests by
outcome and the time to first token's quantiles.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
from typing import Any

REQUEST_TIMEOUT_S = 30.0


class Tally:
    """What the workers saw, under one lock."""

    def __init__(self, max_requests: int) -> None:
        self.lock = threading.Lock()
        self.left = max_requests
        self.outcomes: dict[str, int] = {}
        self.ttfts: list[float] = []

    def take(self) -> bool:
        with self.lock:
            if self.left <= 0:
                return False
            self.left -= 1
            return True

    def record(self, outcome: str, ttft: float | None) -> None:
        with self.lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            if ttft is not None:
                self.ttfts.append(ttft)


def one_request(url: urllib.parse.SplitResult, model: str, max_tokens: int) -> tuple[str, float | None]:
    """Send one streamed completion; its outcome and time to first token."""
    body = json.dumps({"model": model, "prompt": "x" * 400, "max_tokens": max_tokens, "stream": True})
    conn = http.client.HTTPConnection(url.hostname or "", url.port or 80, timeout=REQUEST_TIMEOUT_S)
    start = time.monotonic()
    ttft: float | None = None
    try:
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            resp.read()
            return f"http_{resp.status}", None
        done = False
        while line := resp.readline():
            if line.startswith(b"data: ") and ttft is None:
                ttft = time.monotonic() - start
            if line.strip() == b"data: [DONE]":
                done = True
        return ("ok" if done else "truncated"), ttft
    except (OSError, http.client.HTTPException) as exc:
        return f"error_{type(exc).__name__}", ttft
    finally:
        conn.close()


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(
    url: str, model: str, workers: int, duration_s: float, max_requests: int, max_tokens: int
) -> dict[str, Any]:
    target = urllib.parse.urlsplit(url)
    tally = Tally(max_requests)
    deadline = time.monotonic() + duration_s

    def worker() -> None:
        while time.monotonic() < deadline and tally.take():
            outcome, ttft = one_request(target, model, max_tokens)
            tally.record(outcome, ttft)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:  # each request ends within its timeout after the deadline
        t.join(timeout=duration_s + REQUEST_TIMEOUT_S + 5)
    return {
        "requests": sum(tally.outcomes.values()),
        "outcomes": dict(sorted(tally.outcomes.items())),
        "ttft_p50_s": quantile(tally.ttfts, 0.5),
        "ttft_p99_s": quantile(tally.ttfts, 0.99),
        "elapsed_s": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("model")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds (at most 600)")
    parser.add_argument("--max-requests", type=int, default=5000)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    if not 0 < args.duration <= 600 or not 0 < args.workers <= 64:
        parser.error("the load is bounded: 0 < duration <= 600 s, 0 < workers <= 64")
    summary = run(args.url, args.model, args.workers, args.duration, args.max_requests, args.max_tokens)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
