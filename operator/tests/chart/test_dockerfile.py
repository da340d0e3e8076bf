"""What can be checked of the operator image without building it. The image tier
(``make test-images``, ``e2e/containers/``) builds it on a Debian base made with debootstrap, keeps
it within 200 MB (190.5 MB measured) and runs it as the chart does."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

import yaml

from .chart_files import CHART, REPO

DOCKERFILE = REPO / "images" / "operator" / "Dockerfile"
DOCKERIGNORE = REPO / "images" / "operator" / "Dockerfile.dockerignore"

#: Tools that build or fetch software; none belongs in the image that runs.
BUILD_TOOLS = re.compile(
    r"\b(apt-get|apt|apk|dnf|yum|microdnf|pip3?|gcc|g\+\+|cc|make|build-essential|git|curl|wget)\b"
)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]


def _instructions() -> list[tuple[str, str]]:
    """(KEYWORD, arguments) for each instruction, continuation lines joined, comments dropped."""
    joined: list[str] = []
    current = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        joined.append(current + stripped)
        current = ""
    assert not current, "the Dockerfile ends inside a continued line"
    return [(kw.upper(), args.strip()) for kw, _, args in (i.partition(" ") for i in joined)]


def _parse() -> tuple[dict[str, str], list[Stage]]:
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, rest in _instructions():
        if keyword == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), parts[0])
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif not stages and keyword == "ARG":
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def _final() -> Stage:
    return _parse()[1][-1]


def test_multi_stage_on_a_pinned_base() -> None:
    _, stages = _parse()
    assert len(stages) >= 2, "build and runtime stages"
    for stage in stages:
        image = stage.base
        pinned_digest = re.search(r"@sha256:[0-9a-f]{64}$", image)
        exact_tag = re.search(r":\d+\.\d+\.\d+[\w.-]*$", image)
        assert pinned_digest or exact_tag, f"{image} is not pinned by digest or exact version tag"
        assert not image.endswith(":latest")


def test_final_stage_has_no_build_tools_and_copies_only_the_environment() -> None:
    final = _final()
    assert not final.all("RUN"), "the runtime stage runs nothing: everything is built in the build stage"
    for keyword in ("ADD",):
        assert not final.all(keyword)
    copies = final.all("COPY")
    assert copies, "the runtime stage copies the built environment"
    for copy in copies:
        assert copy.startswith("--from="), f"COPY {copy}: the runtime stage takes only build outputs"
    for _, text in final.instructions:
        assert not BUILD_TOOLS.search(text) or text.startswith("--from="), text


def test_runs_as_a_numeric_non_root_user_matching_the_chart() -> None:
    (user,) = _final().all("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit(), "numeric, so the kubelet can check runAsNonRoot"
    assert int(uid) != 0
    assert not gid or (gid.isdigit() and int(gid) != 0)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(uid)


def test_entrypoint_is_tailguard_and_the_default_command_runs_the_operator() -> None:
    final = _final()
    (entrypoint,) = final.all("ENTRYPOINT")
    assert json.loads(entrypoint) == ["tailguard"], "exec form, so signals reach the operator"
    (cmd,) = final.all("CMD")
    assert json.loads(cmd) == ["run"]
    env = " ".join(final.all("ENV"))
    assert "PATH=/opt/tailguard/bin" in env


def test_exposes_the_ports_the_chart_uses() -> None:
    exposed = {int(p) for line in _final().all("EXPOSE") for p in line.split()}
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert exposed == {values["operator"]["livenessPort"], values["metrics"]["port"]}


def test_labels_name_source_and_version() -> None:
    labels = " ".join(_final().all("LABEL"))
    keys = set(re.findall(r"(org\.opencontainers\.image\.[a-z]+)=", labels))
    assert {
        "org.opencontainers.image.source",
        "org.opencontainers.image.version",
        "org.opencontainers.image.revision",
    } <= keys


def test_build_stage_copies_only_what_exists_and_the_context_keeps_it() -> None:
    _, stages = _parse()
    ignore = DOCKERIGNORE.read_text().splitlines()
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for stage in stages[:-1]:
        for copy in stage.all("COPY"):
            sources = shlex.split(copy)[:-1]
            for source in sources:
                assert (REPO / source).exists(), f"COPY {source}: no such path"
                assert source.rstrip("/") in kept, f"{source} is filtered out of the build context"


def test_builds_without_a_frontend_image_from_a_registry() -> None:
    """A ``# syntax=`` directive makes BuildKit pull its frontend from a registry; the built-in one
    (Docker 20.10+) reads everything this Dockerfile uses, so it also builds where none is reachable."""
    first = DOCKERFILE.read_text().splitlines()[0]
    assert not re.match(r"#\s*syntax\s*=", first, re.I), first


def test_build_stage_runs_on_the_official_or_a_debian_python_base() -> None:
    """``python3`` is on PATH in both (Debian has no ``python`` without python-is-python3)."""
    _, stages = _parse()
    for stage in stages[:-1]:
        for run in stage.all("RUN"):
            assert not re.search(r"(^|[\s;&|])python\s", run), f"bare `python` in: {run}"
    assert any("python3 -m venv /opt/tailguard" in run for run in stages[0].all("RUN"))


def test_a_proxy_ca_reaches_pip_as_a_secret_never_as_a_layer() -> None:
    args, stages = _parse()
    (install,) = [run for run in stages[0].all("RUN") if "pip install" in run]
    assert install.startswith("--mount=type=secret,id=pip-ca")
    assert "PIP_CERT=/run/secrets/pip-ca" in install
    for stage in stages:
        for keyword in ("ARG", "ENV", "COPY"):
            for text in stage.all(keyword):
                assert "cert" not in text.lower() or "--from=" in text, f"{keyword} {text}"
    assert not any("cert" in key.lower() for key in args)
