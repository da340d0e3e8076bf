"""An engine stand-in: one simulated vLLM engine behind one pod, for clusters without GPUs.

It is *not* vLLM. It takes the command line the operator renders for vLLM's image (the model, then
``--served-model-name``, ``--port``, ``--max-num-seqs`` and the rest), so an InferenceService's
Deployment runs it unchanged except for its image, and serves what tailguard and its users touch:

- ``POST /v1/completions`` and ``POST /v1/chat/completions`` (OpenAI-compatible, ``stream`` included):
  each request joins a continuous-batching :class:`~tailguard.sim.engine.Engine` on the wall clock,
  and its tokens come out when the simulator's timing model says so (prefill, then one per decode
  step of the batch it shares). The text is placeholder words; ``max_tokens`` sets the length.
- ``GET /health`` (200 while serving, 503 while draining), ``GET /v1/models``;
- ``GET /metrics``: vLLM's exposition of the engine (``tailguard.sim.exposition``).

Prompt length is estimated as one token per four characters. Flags that only matter to a real
engine are accepted and ignored (listed in the start-up log). Needs no numpy: the engine model is
plain Python.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tailguard.contract.vllm import CUSTOM_BUCKETS_FLAG, parse_bucket_families, slo_histogram_bounds
from tailguard.sim.engine import Engine
from tailguard.sim.exposition import render
from tailguard.sim.profiles import PROFILES, get_profile

log = logging.getLogger("tailguard.standin")

#: Output length when a request names none (vLLM's default for completions is 16).
DEFAULT_MAX_TOKENS = 16
#: How often a waiting request looks at the engine again.
POLL_S = 0.005
WORDS = ("stand", "in", "tokens", "from", "a", "simulated", "engine")


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """vLLM's ``serve`` arguments that shape the simulation, and the list of those ignored."""
    parser = argparse.ArgumentParser(
        prog="tailguard-engine-standin",
        description="A simulated vLLM engine (a stand-in, not vLLM) taking vLLM's serve arguments.",
    )
    parser.add_argument("model", nargs="?", default="stand-in", help="model name (nothing is loaded)")
    parser.add_argument("--model", dest="model_flag", help="the model, as a flag")
    parser.add_argument("--served-model-name", nargs="+", help="names the API answers to")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--shutdown-timeout", type=float, default=0.0, help="drain time on SIGTERM")
    parser.add_argument(
        CUSTOM_BUCKETS_FLAG,
        dest="custom_buckets",
        type=_bucket_families,
        default={},
        help="JSON object of histogram bucket families (time_to_first_token, inter_token_latency)",
    )
    parser.add_argument(
        "--standin-profile",
        default="h100-llama3-8b",
        choices=sorted(PROFILES),
        help="the simulator's engine profile (timing model and KV cache)",
    )
    args, unknown = parser.parse_known_args(list(argv))
    return args, unknown


def _bucket_families(text: str) -> dict[str, tuple[float, ...]]:
    try:
        return parse_bucket_families(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass
class _Done:
    ttft: float
    tpot: float
    end: float


class StandinEngine:
    """An :class:`Engine` run on the wall clock, shared by the request threads."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.origin = clock()
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        self._done: dict[int, _Done] = {}
        engine.on_finish = self._on_finish

    def now(self) -> float:
        return self.clock() - self.origin

    def _on_finish(self, rid: int, ttft: float, tpot: float, end: float) -> None:
        self._done[rid] = _Done(ttft, tpot, end)

    def _advance(self) -> float:
        now = self.now()
        self.engine.advance_to(now)
        return now

    def submit(self, prompt_tokens: int, output_tokens: int) -> int:
        with self.lock:
            now = self._advance()
            rid = next(self._ids)
            self.engine.add_request(rid, now, prompt_tokens, output_tokens)
            return rid

    def tokens(self, rid: int, output_tokens: int) -> Iterator[int]:
        """Yield the count of tokens generated so far each time it grows, as the wall clock reaches
        them; ends after the last. Raises ``RuntimeError`` when the engine rejects the request."""
        sent = 0
        while True:
            with self.lock:
                now = self._advance()
                done = self._done.get(rid)
                state = self.engine.progress(rid) if done is None else None
            if done is not None:
                if not math.isfinite(done.ttft) or (math.isinf(done.tpot) and output_tokens > 1):
                    self._done.pop(rid, None)
                    raise RuntimeError("the engine rejected or aborted the request")
                if done.end <= now:
                    self._done.pop(rid, None)
                    if sent < output_tokens:
                        yield output_tokens
                    return
                generated = sent  # finished in the step still running: the rest at its end
            elif state is not None and 0 <= state[0] <= now:
                generated = state[1]
            else:
                generated = 0
            if generated > sent:
                sent = generated
                yield sent
            time.sleep(POLL_S)

    def metrics(self, model_name: str) -> str:
        with self.lock:
            self._advance()
            return render(self.engine.snapshot(), model_name=model_name)


def _prompt_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


def _words(start: int, end: int) -> str:
    return "".join(f" {WORDS[i % len(WORDS)]}" for i in range(start, end))


class StandinServer:
    """The HTTP side: OpenAI-compatible completions, health, models and metrics."""

    def __init__(self, standin: StandinEngine, *, names: Sequence[str], host: str, port: int) -> None:
        self.standin = standin
        self.names = list(names)
        self.draining = threading.Event()
        self.in_flight = 0
        self._count_lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{host!s}:{port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s " + format, self.address_string(), *args)

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, code: int, obj: Any) -> None:
                self._send(code, json.dumps(obj).encode(), "application/json")

            def _error(self, code: int, message: str) -> None:
                self._json(code, {"error": {"message": message, "type": "BadRequestError", "code": code}})

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/health":
                    self._send(503 if server.draining.is_set() else 200, b"", "text/plain")
                elif path == "/metrics":
                    text = server.standin.metrics(server.names[0])
                    self._send(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
                elif path == "/v1/models":
                    data = [
                        {"id": n, "object": "model", "owned_by": "tailguard-standin"} for n in server.names
                    ]
                    self._json(200, {"object": "list", "data": data})
                else:
                    self._error(404, f"no route {path}")

            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0]
                if path not in ("/v1/completions", "/v1/chat/completions"):
                    self._error(404, f"no route {path}")
                    return
                if server.draining.is_set():
                    self._error(503, "shutting down")
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if not isinstance(body, dict):
                        raise ValueError("the body is not a JSON object")
                except ValueError as exc:
                    self._error(400, f"invalid JSON body: {exc}")
                    return
                with server._count_lock:
                    server.in_flight += 1
                try:
                    server.complete(self, body, chat=path.endswith("/chat/completions"))
                finally:
                    with server._count_lock:
                        server.in_flight -= 1

        return Handler

    def complete(self, handler: Any, body: dict[str, Any], *, chat: bool) -> None:
        model = body.get("model") or self.names[0]
        if model not in self.names:
            handler._error(404, f"The model `{model}` does not exist.")
            return
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                handler._error(400, "messages: a non-empty list is required")
                return
            text = "".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        else:
            prompt = body.get("prompt", "")
            text = "".join(map(str, prompt)) if isinstance(prompt, list) else str(prompt)
        try:
            output = int(body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS)
        except (TypeError, ValueError):
            handler._error(400, "max_tokens must be an integer")
            return
        if output < 1:
            handler._error(400, "max_tokens must be at least 1")
            return
        prompt_tokens = _prompt_tokens(text)
        limit = self.standin.engine.profile.max_model_len
        if prompt_tokens + output > limit:
            handler._error(
                400, f"prompt ({prompt_tokens} tokens) + max_tokens ({output}) > max model length {limit}"
            )
            return
        rid = self.standin.submit(prompt_tokens, output)
        ident = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        kind = "chat.completion" if chat else "text_completion"
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": output,
            "total_tokens": prompt_tokens + output,
        }

        def choice(text: str, finish: str | None, *, delta: bool) -> dict[str, Any]:
            if not chat:
                return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            key = "delta" if delta else "message"
            return {"index": 0, key: {"role": "assistant", "content": text}, "finish_reason": finish}

        if not body.get("stream"):
            try:
                for _ in self.standin.tokens(rid, output):
                    pass
            except RuntimeError as exc:
                handler._error(500, str(exc))
                return
            handler._json(
                200,
                {
                    "id": ident,
                    "object": kind,
                    "created": created,
                    "model": model,
                    "choices": [choice(_words(0, output), "length", delta=False)],
                    "usage": usage,
                },
            )
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        chunk_kind = f"{kind}.chunk" if chat else kind

        def event(obj: Any) -> None:
            handler.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
            handler.wfile.flush()

        sent = 0
        try:
            for generated in self.standin.tokens(rid, output):
                finish = "length" if generated >= output else None
                chunk = {
                    "id": ident,
                    "object": chunk_kind,
                    "created": created,
                    "model": model,
                    "choices": [choice(_words(sent, generated), finish, delta=True)],
                }
                if finish and (body.get("stream_options") or {}).get("include_usage"):
                    chunk["usage"] = usage
                event(chunk)
                sent = generated
            handler.wfile.write(b"data: [DONE]\n\n")
            handler.wfile.flush()
        except RuntimeError as exc:
            event({"error": {"message": str(exc), "code": 500}})
        except (BrokenPipeError, ConnectionResetError):
            log.debug("client went away after %d tokens", sent)

    def serve(self, shutdown_timeout: float) -> None:
        """Serve until SIGTERM or SIGINT; then refuse new requests and drain for up to the timeout."""
        stop = threading.Event()

        def on_signal(signum: int, _frame: Any) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        thread.start()
        stop.wait()
        self.draining.set()
        deadline = time.monotonic() + shutdown_timeout
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        self.httpd.shutdown()
        self.httpd.server_close()


def build(args: argparse.Namespace) -> StandinEngine:
    profile = get_profile(args.standin_profile)
    if args.max_model_len:
        profile = replace(profile, max_model_len=args.max_model_len)
    ttft_buckets, tpot_buckets = slo_histogram_bounds(args.custom_buckets)
    engine = Engine(
        profile,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        ttft_buckets_s=ttft_buckets,
        tpot_buckets_s=tpot_buckets,
    )
    return StandinEngine(engine)


def main(argv: Sequence[str] | None = None) -> int:
    """``tailguard-engine-standin MODEL [vLLM serve flags]``: serve until SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args, ignored = parse_args(sys.argv[1:] if argv is None else argv)
    model = args.model_flag or args.model
    names = args.served_model_name or [model]
    standin = build(args)
    server = StandinServer(standin, names=names, host=args.host, port=args.port)
    engine = standin.engine
    print(
        f"tailguard engine stand-in (simulated, not vLLM) for {model} as {', '.join(names)} on "
        f"{server.address}: profile {engine.profile.name}, max-num-seqs {engine.max_num_seqs}, "
        f"max-num-batched-tokens {engine.max_num_batched_tokens}, "
        f"max-model-len {engine.profile.max_model_len}",
        flush=True,
    )
    if ignored:
        print(f"ignored (no meaning in the simulation): {' '.join(ignored)}", flush=True)
    server.serve(args.shutdown_timeout)
    return 0
