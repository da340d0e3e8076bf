"""The engine stand-in: vLLM's serve arguments, OpenAI completions (streamed or not), health, metrics."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tailguard.contract.vllm import TPOT_BUCKETS_S, VllmMetric
from tailguard.fleet import standin
from tailguard.k8s.render import RenderSettings, render_all
from tailguard.manifests import load_inference_services
from tailguard.reconcile.sizing import running_size
from tg_testing import REPO


def test_takes_the_arguments_the_operator_renders() -> None:
    (isvc,) = load_inference_services(REPO / "examples" / "llama-8b-chat.yaml")
    size = running_size(isvc)
    rendered = render_all(isvc, size.replicas, size.max_batch, RenderSettings())
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args, ignored = standin.parse_args(container["args"])
    assert args.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert args.served_model_name == ["llama-8b-chat"]
    assert args.port == container["ports"][0]["containerPort"]
    assert args.max_num_seqs == 256
    assert args.max_num_batched_tokens == 8192
    assert args.max_model_len == 8192
    assert args.shutdown_timeout == 30
    assert ignored == ["--gpu-memory-utilization", "0.9", "--tensor-parallel-size", "1"]
    engine = standin.build(args).engine
    assert (engine.max_num_seqs, engine.max_num_batched_tokens) == (256, 8192)


def test_exports_the_histogram_buckets_the_operator_asks_for() -> None:
    (isvc,) = load_inference_services(REPO / "examples" / "dry-run.yaml")  # TTFT SLO 800 ms
    rendered = render_all(isvc, 1, 64, RenderSettings())
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    args, ignored = standin.parse_args(deployment["spec"]["template"]["spec"]["containers"][0]["args"])
    assert "--custom-histogram-buckets" not in ignored
    engine = standin.build(args).engine
    assert 0.8 in engine.ttft.bounds
    assert engine.tpot.bounds == TPOT_BUCKETS_S


@pytest.mark.parametrize(
    "value",
    ['{"time_to_first_token": [1, 0.5]}', "[0.5]", "not json", '{"time_to_first_token": [true]}'],
    ids=["decreasing", "not an object", "not JSON", "a boolean bound"],
)
def test_refuses_buckets_vllm_refuses(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        standin.parse_args(["m", "--custom-histogram-buckets", value])
    assert "--custom-histogram-buckets" in capsys.readouterr().err


@pytest.fixture
def server() -> Iterator[standin.StandinServer]:
    args, _ = standin.parse_args(["m", "--served-model-name", "svc", "--max-num-seqs", "4"])
    srv = standin.StandinServer(standin.build(args), names=["svc"], host="127.0.0.1", port=0)
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def _request(srv: standin.StandinServer, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    host, port = srv.httpd.server_address[:2]
    conn = http.client.HTTPConnection(str(host), int(port), timeout=30)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body))
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_health_models_and_vllm_metrics(server: standin.StandinServer) -> None:
    assert _request(server, "GET", "/health")[0] == 200
    status, body = _request(server, "GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in json.loads(body)["data"]] == ["svc"]
    status, body = _request(server, "GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert f'{VllmMetric.RUNNING.value}{{model_name="svc"' in text
    assert f"# TYPE {VllmMetric.TTFT.value} histogram" in text
    server.draining.set()
    assert _request(server, "GET", "/health")[0] == 503


def test_completion_takes_the_models_time_and_is_counted(server: standin.StandinServer) -> None:
    started = time.monotonic()
    status, body = _request(
        server, "POST", "/v1/completions", {"model": "svc", "prompt": "x" * 400, "max_tokens": 20}
    )
    took = time.monotonic() - started
    assert status == 200, body
    answer = json.loads(body)
    assert answer["object"] == "text_completion"
    assert answer["usage"] == {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    assert len(answer["choices"][0]["text"].split()) == 20
    assert took > 20 * 0.004, "20 decode steps of the H100 profile take several milliseconds each"
    text = _request(server, "GET", "/metrics")[1].decode()
    assert f'{VllmMetric.GENERATION_TOKENS.value}{{model_name="svc",engine="0"}} 20' in text
    assert f'{VllmMetric.PROMPT_TOKENS.value}{{model_name="svc",engine="0"}} 100' in text


def test_chat_stream_sends_tokens_as_server_sent_events(server: standin.StandinServer) -> None:
    body = {
        "model": "svc",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, raw = _request(server, "POST", "/v1/chat/completions", body)
    assert status == 200
    events = [line.removeprefix("data: ") for line in raw.decode().split("\n\n") if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) >= 2, "the first token and later ones arrive separately"
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks)
    assert len(text.split()) == 12
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["completion_tokens"] == 12


def test_refuses_what_vllm_refuses(server: standin.StandinServer) -> None:
    assert _request(server, "POST", "/v1/completions", {"model": "other", "prompt": "x"})[0] == 404
    too_long = {"model": "svc", "prompt": "x" * 40_000, "max_tokens": 10}
    assert _request(server, "POST", "/v1/completions", too_long)[0] == 400
    assert _request(server, "POST", "/v1/chat/completions", {"model": "svc", "messages": []})[0] == 400
    assert _request(server, "POST", "/v1/embeddings", {})[0] == 404


def test_max_num_seqs_bounds_the_running_batch(server: standin.StandinServer) -> None:
    results: list[int] = []

    def one() -> None:
        results.append(
            _request(server, "POST", "/v1/completions", {"prompt": "x" * 40, "max_tokens": 200})[0]
        )

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    peak_running = 0
    while any(t.is_alive() for t in threads):
        engine = server.standin.engine
        with server.standin.lock:
            peak_running = max(peak_running, engine.num_running)
        time.sleep(0.002)
    for t in threads:
        t.join()
    assert results == [200] * 8
    assert 1 <= peak_running <= 4
