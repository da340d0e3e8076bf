"""The simulated fleet: vLLM-shaped exposition, even spread, pods coming and going."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tailguard.contract.vllm import TTFT_BUCKETS_S
from tailguard.fleet.model import PodFleet, PodInfo
from tailguard.fleet.server import FleetServer, pod_info
from tailguard.sim.profiles import get_profile
from tailguard.sim.synthetic import DECODE_HEAVY


def _pod(name: str, *, ready: bool = True, batch: int = 256) -> PodInfo:
    return PodInfo("team-a", name, "chat", "chat-model", batch, ready)


def _fleet(rate: float = 20.0) -> PodFleet:
    fleet = PodFleet(get_profile("h100-llama3-8b"), seed=7)
    fleet.set_rate("team-a", "chat", rate)
    return fleet


def _families(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {
        f.name: [(s.name, s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)
    }


def test_exposition_has_the_names_labels_and_buckets_of_vllm() -> None:
    fleet = _fleet()
    fleet.sync_pods([_pod("chat-a")])
    fleet.advance(30.0)
    families = _families(fleet.metrics("team-a", "chat-a") or "")
    ttft = families["vllm:time_to_first_token_seconds"]
    bounds = [float(labels["le"]) for name, labels, _ in ttft if name.endswith("_bucket")]
    assert bounds == [*TTFT_BUCKETS_S, float("inf")]
    assert all(labels["model_name"] == "chat-model" and labels["engine"] == "0" for _, labels, _ in ttft)
    assert "vllm:request_time_per_output_token_seconds" in families
    assert "vllm:kv_cache_usage_perc" in families
    finished = [
        v for name, labels, v in families["vllm:request_success"] if labels.get("finished_reason") == "stop"
    ]
    assert finished[0] > 400, "about 20 req/s for 30 s"


def test_load_is_spread_evenly_over_ready_pods() -> None:
    fleet = _fleet()
    fleet.sync_pods([_pod("chat-a"), _pod("chat-b"), _pod("chat-c", ready=False)])
    fleet.advance(60.0)
    counts = []
    for pod in ("chat-a", "chat-b"):
        samples = _families(fleet.metrics("team-a", pod) or "")["vllm:request_success"]
        counts.append(sum(v for _, _, v in samples))
    # Arrivals alternate between the pods; finished counts differ only by what is still in flight.
    assert abs(counts[0] - counts[1]) <= 0.02 * max(counts)
    assert fleet.metrics("team-a", "chat-c") is None


def test_a_service_can_have_its_own_token_mix() -> None:
    fleet = _fleet(rate=5.0)
    fleet.set_rate("team-a", "long", 5.0)
    fleet.set_mix("team-a", "long", DECODE_HEAVY)
    fleet.sync_pods([_pod("chat-a"), PodInfo("team-a", "long-a", "long", "long-model", 256, True)])
    fleet.advance(120.0)

    def mean_output(pod: str) -> float:
        families = _families(fleet.metrics("team-a", pod) or "")
        tokens = sum(v for _, _, v in families["vllm:generation_tokens"])
        requests = sum(v for _, _, v in families["vllm:request_success"])
        return tokens / requests

    # The default mix (ShareGPT) averages ~180 output tokens; decode-heavy asks for 256 each.
    assert mean_output("long-a") > 240
    assert mean_output("chat-a") < 220


def test_no_ready_pod_means_dropped_requests() -> None:
    fleet = _fleet()
    fleet.advance(10.0)
    assert fleet.dropped[("team-a", "chat")] > 100


def test_a_max_batch_change_restarts_the_engine() -> None:
    fleet = _fleet()
    fleet.sync_pods([_pod("chat-a", batch=256)])
    fleet.advance(20.0)
    fleet.sync_pods([_pod("chat-a", batch=32)])
    prompt_tokens = _families(fleet.metrics("team-a", "chat-a") or "")["vllm:prompt_tokens"]
    assert [value for _, _, value in prompt_tokens] == [0.0], "a fresh engine after the restart"


def test_pod_info_reads_args_and_readiness() -> None:
    pod = {
        "metadata": {
            "name": "chat-x",
            "namespace": "team-a",
            "labels": {"tailguard.dev/inference-service": "chat"},
        },
        "spec": {"containers": [{"args": ["m", "--served-model-name", "served", "--max-num-seqs", "64"]}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert pod_info(pod) == PodInfo("team-a", "chat-x", "chat", "served", 64, True)
    assert pod_info({"metadata": {"name": "other"}}) is None


@pytest.mark.parametrize(
    ("value", "tpot_has_edge"),
    [('{"inter_token_latency":[0.01,0.015,0.025,0.05]}', True), ("[0.015]", False)],
    ids=["the SLO's edge", "a value vLLM refuses: its defaults"],
)
def test_pod_info_reads_the_histogram_buckets_the_pod_runs_with(value: str, tpot_has_edge: bool) -> None:
    pod = {
        "metadata": {
            "name": "chat-x",
            "namespace": "team-a",
            "labels": {"tailguard.dev/inference-service": "chat"},
        },
        "spec": {"containers": [{"args": ["m", "--custom-histogram-buckets", value]}]},
    }
    info = pod_info(pod)
    assert info is not None
    assert (0.015 in info.tpot_buckets_s) is tpot_has_edge, info.tpot_buckets_s
    assert info.ttft_buckets_s == TTFT_BUCKETS_S, "a family left out keeps vLLM's defaults"


def test_server_serves_metrics_load_and_discovery(tmp_path: Path) -> None:
    fleet = _fleet(rate=0.0)
    pods = [
        {
            "metadata": {
                "name": "chat-a",
                "namespace": "team-a",
                "labels": {"tailguard.dev/inference-service": "chat"},
            },
            "spec": {"containers": [{"args": ["m", "--max-num-seqs", "64"]}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
    ]
    sd = tmp_path / "targets.json"
    server = FleetServer(fleet, host="127.0.0.1", port=0, sd_file=sd, list_pods=lambda: pods)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        for _ in range(50):
            if sd.exists():
                break
            server.stop.wait(0.1)
        targets = json.loads(sd.read_text())
        assert targets[0]["labels"]["inference_service"] == "chat"
        base = f"http://{server.address}"
        body = (
            urllib.request.urlopen(f"{base}{targets[0]['labels']['__metrics_path__']}", timeout=5)
            .read()
            .decode()
        )
        assert "vllm:num_requests_running" in body
        request = urllib.request.Request(
            f"{base}/load",
            data=json.dumps({"namespace": "team-a", "service": "chat", "rate": 5}).encode(),
            method="POST",
        )
        assert urllib.request.urlopen(request, timeout=5).status == 200
        assert fleet.rates[("team-a", "chat")] == 5.0
    finally:
        server.stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--rate", "bad"], "--rate must be NAMESPACE/SERVICE=RPS"),
        (["--rate", "ns/svc=-1"], "--rate must be NAMESPACE/SERVICE=RPS with RPS >= 0"),
        (["--profile", "tpu"], "unknown profile 'tpu'"),
        (["--listen", "nonsense"], "--listen must be HOST:PORT"),
    ],
)
def test_bad_fleet_options_are_one_line_before_any_cluster(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tailguard.cli import main

    assert main(["fleet", "--sd-file", str(tmp_path / "sd.json"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == err.splitlines()[0], err
    assert err.startswith("error: ")
    assert says in err


def test_the_fleet_without_a_cluster_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import kubernetes.config

    from tailguard.cli import main

    monkeypatch.setattr(kubernetes.config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["fleet", "--sd-file", str(tmp_path / "sd.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: no Kubernetes configuration to run against")
    assert not (tmp_path / "sd.json").exists()
