"""Find the helm binary and render the chart with it.

helm is looked up in ``$HELM``, then on ``PATH``, then in the per-user tool cache that
``make cluster-tools`` fills (``<cache>/bin/helm-<version>/helm``). Tests that need
it skip when it is absent, unless ``TAILGUARD_REQUIRE_CLUSTER=1`` (set by CI once the tools are
built), where a missing helm is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tailguard.k8s.cluster import Manifest

CHART = Path(__file__).resolve().parents[3] / "charts" / "tailguard"
#: The Kubernetes version templates are rendered for (helm's built-in default depends on its build).
KUBE_VERSION = "1.33.0"
RELEASE = "tg"
NAMESPACE = "tailguard-system"


def _cache_dir() -> Path:
    """The tool cache: ``$TAILGUARD_CACHE_DIR``, else ``$XDG_CACHE_HOME/tailguard`` or ``~/.cache/tailguard``."""
    explicit = os.environ.get("TAILGUARD_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "tailguard"


def find_helm() -> str | None:
    """The helm executable to use, or None."""
    explicit = os.environ.get("HELM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    on_path = shutil.which("helm")
    if on_path:
        return on_path
    found = sorted(p for p in (_cache_dir() / "bin").glob("helm-*/helm") if os.access(p, os.X_OK))
    return str(found[-1]) if found else None


def require_tool(found: str | None, reason: str) -> str:
    """``found``; without it skip the test, or fail it when the environment demands the tools."""
    if found is not None:
        return found
    if os.environ.get("TAILGUARD_REQUIRE_CLUSTER") == "1":
        pytest.fail(f"{reason} (TAILGUARD_REQUIRE_CLUSTER=1)")
    pytest.skip(reason)


def require_helm() -> str:
    """helm's path; skips the test without it, or fails when the environment demands the tools."""
    return require_tool(
        find_helm(), "helm not found: set HELM, put helm on PATH, or run `make cluster-tools`"
    )


def require_promtool() -> str:
    """promtool (Prometheus's checker, installed with Prometheus by `make cluster-tools`)."""
    explicit = os.environ.get("PROMTOOL")
    found = explicit if explicit and os.access(explicit, os.X_OK) else shutil.which("promtool")
    return require_tool(
        found, "promtool not found: set PROMTOOL, or run `make cluster-tools` (Debian prometheus)"
    )


class HelmError(RuntimeError):
    """helm exited non-zero; the message is its stderr."""


class Helm:
    """Runs helm against the chart with values given as Python data."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir

    def run(self, *args: str) -> str:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.workdir / "cache"),
            "HELM_CONFIG_HOME": str(self.workdir / "config"),
            "HELM_DATA_HOME": str(self.workdir / "data"),
        }
        proc = subprocess.run(
            [self.binary, *args], capture_output=True, text=True, env=env, timeout=120, check=False
        )
        if proc.returncode != 0:
            raise HelmError(proc.stderr.strip() or proc.stdout.strip())
        return proc.stdout

    def _values_file(self, values: Mapping[str, Any]) -> str:
        path = self.workdir / f"values-{len(list(self.workdir.glob('values-*.yaml')))}.yaml"
        path.write_text(yaml.safe_dump(dict(values)), encoding="utf-8")
        return str(path)

    def template(
        self,
        values: Mapping[str, Any] | None = None,
        *,
        extra: Sequence[str] = (),
        namespace: str = NAMESPACE,
        release: str = RELEASE,
    ) -> list[Manifest]:
        """The rendered manifests (hook and test resources included), CRDs left out."""
        args = ["template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION]
        if values:
            args += ["--values", self._values_file(values)]
        out = self.run(*args, *extra)
        return [doc for doc in yaml.safe_load_all(out) if doc]

    def notes(self, *extra: str, namespace: str = NAMESPACE, release: str = RELEASE) -> str:
        """The rendered NOTES.txt. ``helm template`` leaves NOTES out and ``helm install --dry-run``
        needs a cluster, so a copy of the chart renders it as an ordinary template."""
        import shutil

        copy = self.workdir / "notes-chart"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(CHART, copy)
        templates = copy / "templates"
        body = (templates / "NOTES.txt").read_text(encoding="utf-8")
        (templates / "NOTES.txt").unlink()
        # helm parses every rendered template as YAML: the notes travel as one block scalar.
        (templates / "_notes_body.tpl").write_text(
            '{{- define "tg-notes-body" -}}\n' + body + "\n{{- end -}}\n", encoding="utf-8"
        )
        (templates / "notes.yaml").write_text(
            'notes: |\n{{ include "tg-notes-body" . | indent 2 }}\n', encoding="utf-8"
        )
        args = ["template", release, str(copy), "--namespace", namespace, "--kube-version", KUBE_VERSION]
        rendered = yaml.safe_load(self.run(*args, "--show-only", "templates/notes.yaml", *extra))
        return str(rendered["notes"])

    def lint(self, values: Mapping[str, Any] | None = None, *, strict: bool = True) -> str:
        args = ["lint", str(CHART), "--kube-version", KUBE_VERSION]
        if strict:
            args.append("--strict")
        if values:
            args += ["--values", self._values_file(values)]
        return self.run(*args)


def find(manifests: Sequence[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    """Manifests of ``kind`` (and ``name``)."""
    return [m for m in manifests if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]


def one(manifests: Sequence[Manifest], kind: str, name: str | None = None) -> Manifest:
    """The single manifest of ``kind`` (and ``name``); fails the test otherwise."""
    found = find(manifests, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]
