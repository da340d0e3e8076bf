"""The engine stand-in image, started with exactly the arguments the operator renders for an
InferenceService's vLLM container: it must come up healthy, expose vLLM's metrics, stream a chat
completion, and stop cleanly on SIGTERM. (A stand-in: simulated timing, placeholder text.)"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

from lib.operator import CHART_UID
from lib.wait import wait_for
from tailguard.contract.vllm import VllmMetric
from tailguard.k8s.render import RenderSettings, render_all
from tailguard.manifests import load_inference_services
from tailguard.reconcile.sizing import running_size

pytestmark = pytest.mark.images

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_standin_serves_the_rendered_deployment_unchanged(docker: str, standin_image_tag: str) -> None:
    (isvc,) = load_inference_services(REPO / "examples" / "llama-8b-chat.yaml")
    size = running_size(isvc)
    rendered = render_all(isvc, size.replicas, size.max_batch, RenderSettings())
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container_port = container["ports"][0]["containerPort"]
    probe_path = container["readinessProbe"]["httpGet"]["path"]
    served = isvc.spec.model.served_name or isvc.metadata.name
    port = _free_port()
    name = f"tailguard-standin-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [
            docker,
            "run",
            "--detach",
            f"--name={name}",
            f"--publish=127.0.0.1:{port}:{container_port}",
            f"--user={CHART_UID}:{CHART_UID}",
            "--read-only",
            "--cap-drop=ALL",
            standin_image_tag,
            *[str(a) for a in container["args"]],
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )

    def logs() -> str:
        out = subprocess.run([docker, "logs", name], capture_output=True, text=True, check=False)
        return out.stdout + out.stderr

    def get(path: str) -> tuple[int, str] | None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        except OSError:
            return None
        finally:
            conn.close()

    try:
        wait_for(
            "the stand-in's probe path",
            lambda: (get(probe_path) or (0, ""))[0] == 200,
            timeout=60,
            details=logs,
        )
        assert "simulated, not vLLM" in logs()
        assert f"max-num-seqs {isvc.spec.engine.max_num_seqs}" in logs()

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = {
            "model": served,
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 8,
            "stream": True,
        }
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=json.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.getheader("Content-Type") == "text/event-stream"
        events = [e.removeprefix("data: ") for e in resp.read().decode().split("\n\n") if e]
        conn.close()
        assert events[-1] == "[DONE]"
        text = "".join(json.loads(e)["choices"][0]["delta"]["content"] for e in events[:-1])
        assert len(text.split()) == 8

        metrics = get("/metrics")
        assert metrics is not None
        assert metrics[0] == 200
        assert f'{VllmMetric.GENERATION_TOKENS.value}{{model_name="{served}",engine="0"}} 8' in metrics[1]
        assert f"# TYPE {VllmMetric.TTFT.value} histogram" in metrics[1]

        subprocess.run([docker, "stop", "--time=40", name], capture_output=True, check=True, timeout=60)
        state = subprocess.run(
            [docker, "inspect", "-f", "{{.State.ExitCode}}", name], capture_output=True, text=True, check=True
        )
        assert state.stdout.strip() == "0", logs()
        assert "Traceback" not in logs()
    finally:
        subprocess.run([docker, "rm", "--force", name], capture_output=True, check=False)
