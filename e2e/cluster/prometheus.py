"""A real Prometheus on loopback, with a configuration the tests control.

``Prometheus(directory).start(scrape_configs)`` writes the configuration (JSON, which Prometheus
reads as YAML), starts the server on a free 127.0.0.1 port and waits until it is ready. The default
configuration scrapes every target listed in ``<directory>/targets.json`` (file service discovery,
re-read every second), so a test can add a target by calling :meth:`Prometheus.set_targets` without
a reload. :meth:`Prometheus.reload` swaps the whole configuration.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cluster.control_plane import (
    ClusterError,
    _cmdline,
    _die_with_parent,
    _pid_alive,
    _tail,
    free_ports,
    stop_process_group,
    wait_until,
)


def _get_json(url: str, timeout: float = 5) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        data = json.loads(resp.read())
    return data if isinstance(data, dict) else {"data": data}


class Prometheus:
    """One Prometheus server whose files all live under ``directory``."""

    def __init__(self, directory: Path, *, binary: Path | None = None) -> None:
        self.directory = directory.resolve()
        self._binary = binary

    @property
    def config_file(self) -> Path:
        return self.directory / "prometheus.json"

    @property
    def targets_file(self) -> Path:
        return self.directory / "targets.json"

    @property
    def log_file(self) -> Path:
        return self.directory / "prometheus.log"

    @property
    def state_file(self) -> Path:
        return self.directory / "state.json"

    def _state(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.state_file.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    @property
    def url(self) -> str:
        state = self._state()
        if state is None:
            raise ClusterError(f"Prometheus is not running from {self.directory}")
        return f"http://127.0.0.1:{state['port']}"

    def is_running(self) -> bool:
        state = self._state()
        if state is None:
            return False
        pid = int(state["pid"])
        cmd = _cmdline(pid)
        return _pid_alive(pid) and bool(cmd) and cmd[0] == state["cmd"][0]

    def default_scrape_configs(self, interval: str = "1s") -> list[dict[str, Any]]:
        return [
            {
                "job_name": "targets",
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "file_sd_configs": [{"files": [str(self.targets_file)], "refresh_interval": "1s"}],
            }
        ]

    def _write_config(self, scrape_configs: Sequence[dict[str, Any]], interval: str) -> None:
        config = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "evaluation_interval": interval,
            },
            "scrape_configs": list(scrape_configs),
        }
        tmp = self.config_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(config, indent=2) + "\n")
        tmp.replace(self.config_file)

    def set_targets(self, targets: Sequence[str], labels: dict[str, str] | None = None) -> None:
        """Replace the file-discovered targets (``host:port`` on loopback) of the default config."""
        for t in targets:
            host = t.rsplit(":", 1)[0]
            if host not in ("127.0.0.1", "localhost", "[::1]"):
                raise ValueError(f"scrape targets must be on loopback, got {t!r}")
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": list(targets), "labels": labels or {}}]) + "\n")
        tmp.replace(self.targets_file)

    def start(
        self,
        scrape_configs: Sequence[dict[str, Any]] | None = None,
        *,
        interval: str = "1s",
        timeout: float = 60,
        die_with_parent: bool = False,
    ) -> str:
        """Start (or restart with this configuration) and wait until ready; returns the base URL."""
        binary = self._binary or (Path(p) if (p := shutil.which("prometheus")) else None)
        if binary is None:
            raise ClusterError(
                "prometheus is not installed; run `make cluster-tools` (Debian package prometheus)"
            )
        self.stop()
        self.directory.mkdir(parents=True, exist_ok=True)
        data = self.directory / "data"
        shutil.rmtree(data, ignore_errors=True)
        if not self.targets_file.exists():
            self.set_targets([])
        self._write_config(
            scrape_configs if scrape_configs is not None else self.default_scrape_configs(interval), interval
        )
        (port,) = free_ports(1)
        cmd = [
            str(binary),
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=6h",
            "--log.level=warn",
        ]
        with open(self.log_file, "w") as fh:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                start_new_session=True,
                preexec_fn=_die_with_parent if die_with_parent else None,
            )
        self.state_file.write_text(json.dumps({"pid": proc.pid, "port": port, "cmd": cmd}) + "\n")
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            if proc.poll() is not None:
                raise ClusterError(
                    f"prometheus exited ({proc.returncode}); last lines of {self.log_file}:\n{_tail(self.log_file)}"
                )
            with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)

        wait_until("Prometheus /-/ready", ready, timeout=timeout, hint=lambda: _tail(self.log_file))
        return url

    def reload(self, scrape_configs: Sequence[dict[str, Any]], *, interval: str = "1s") -> None:
        """Swap the configuration of the running server (POST /-/reload)."""
        self._write_config(scrape_configs, interval)
        req = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            if resp.status != 200:
                raise ClusterError(f"Prometheus reload answered HTTP {resp.status}")

    def stop(self) -> None:
        state = self._state()
        if state is not None and self.is_running():
            stop_process_group(int(state["pid"]))
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()

    # reading ---------------------------------------------------------------------------------------
    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; returns the result vector (raises on a PromQL error)."""
        data = _get_json(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        if data.get("status") != "success":
            raise ClusterError(f"query {expr!r} failed: {data}")
        result = data["data"]["result"]
        return list(result)

    def targets(self) -> list[dict[str, Any]]:
        data = _get_json(f"{self.url}/api/v1/targets?state=active")
        return list(data["data"]["activeTargets"])

    def wait_for_targets_up(self, count: int, *, timeout: float = 30) -> list[dict[str, Any]]:
        """Wait until at least ``count`` active targets report health "up"."""

        def probe() -> list[dict[str, Any]] | None:
            up = [t for t in self.targets() if t.get("health") == "up"]
            return up if len(up) >= count else None

        def hint() -> str:
            try:
                return "targets now: " + json.dumps(
                    [(t.get("scrapeUrl"), t.get("health"), t.get("lastError")) for t in self.targets()]
                )
            except (OSError, urllib.error.URLError) as exc:
                return f"(could not list targets: {exc})"

        return wait_until(f"{count} Prometheus targets up", probe, timeout=timeout, hint=hint)


@contextlib.contextmanager
def running(directory: Path, scrape_configs: Sequence[dict[str, Any]] | None = None) -> Iterator[Prometheus]:
    prom = Prometheus(directory)
    try:
        prom.start(scrape_configs, die_with_parent=True)
        yield prom
    finally:
        prom.stop()


def default_directory(cluster_state_dir: Path) -> Path:
    return cluster_state_dir / "prometheus"


__all__ = ["Prometheus", "default_directory", "running"]
