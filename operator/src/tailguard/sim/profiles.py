"""Engine-step time models of one vLLM replica, fitted to the published figures of ``calibration.md``.

One engine step batches every running decode (one token each) with prefill chunks, within
``max-num-batched-tokens``. Its duration follows the shape described in the calibration notes::

    step = base + per_seq * seqs + per_token * max(0, tokens - knee) + per_context * context

``base`` is the weight read that every step pays, ``per_seq`` the per-sequence overhead (sampling,
scheduling, small kernels), ``per_token`` the compute-bound growth once the batch passes the knee,
and ``per_context`` the attention's read of the KV cache (every sequence's context, once per step).
The figures were fitted by simulating one replica under the benchmark conditions of each row and
are checked by ``operator/tests/sim/test_calibration.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from tailguard.manifests import yaml_error_line


@dataclass(frozen=True)
class EngineProfile:
    """A model on a GPU type: the step-time model, KV capacity and vLLM's defaults there."""

    name: str
    description: str
    gpus: int
    base_step_s: float
    per_seq_s: float
    per_token_s: float
    knee_tokens: int
    per_context_token_s: float
    kv_capacity_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    #: The calibration rows the figures were fitted to.
    rows: tuple[str, ...] = ()

    def step_time(self, seqs: int, tokens: int, context: float) -> float:
        """Seconds of one engine step over ``seqs`` sequences, ``tokens`` new tokens, ``context`` KV."""
        over = tokens - self.knee_tokens
        return (
            self.base_step_s
            + self.per_seq_s * seqs
            + (self.per_token_s * over if over > 0 else 0.0)
            + self.per_context_token_s * context
        )


# KV capacity: (GPU memory × 0.9 − weights) / bytes per token. Llama-3-8B keeps 128 KiB per token
# in BF16 (32 layers × 8 KV heads × 128 × 2 × 2 bytes), Llama-3-70B 320 KiB (80 layers).
_KIB = 1024
_GIB = 1024**3

PROFILES: dict[str, EngineProfile] = {
    p.name: p
    for p in (
        EngineProfile(
            name="h100-llama3-8b",
            description="Llama-3-8B BF16 on 1×H100 80 GB (vLLM 0.6-era figures)",
            gpus=1,
            base_step_s=0.0074,
            per_seq_s=0.00004,
            per_token_s=0.00003,
            knee_tokens=128,
            per_context_token_s=0.00000002,
            kv_capacity_tokens=int((80 * 0.9 - 16) * _GIB / (128 * _KIB)),
            max_num_seqs=256,
            max_num_batched_tokens=8192,
            max_model_len=8192,
            rows=("A", "A′", "A″", "C"),
        ),
        EngineProfile(
            name="a100-llama3-8b",
            description="Llama-3-8B BF16 on 1×A100 80 GB (vLLM 0.6-era figures)",
            gpus=1,
            base_step_s=0.013,
            per_seq_s=0.0001,
            per_token_s=0.00005,
            knee_tokens=64,
            per_context_token_s=0.00000002,
            kv_capacity_tokens=int((80 * 0.9 - 16) * _GIB / (128 * _KIB)),
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            max_model_len=8192,
            rows=("B",),
        ),
        EngineProfile(
            name="h100-llama3-8b-fp8",
            description="Llama-3.1-8B FP8 on 1×H100 80 GB (NIM-era figures)",
            gpus=1,
            base_step_s=0.0042,
            per_seq_s=0.000035,
            per_token_s=0.000007,
            knee_tokens=128,
            per_context_token_s=0.0,
            kv_capacity_tokens=int((80 * 0.9 - 8.5) * _GIB / (64 * _KIB)),
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            max_model_len=16384,
            rows=("F",),
        ),
        EngineProfile(
            name="h100x2-llama3-70b-fp8",
            description="Llama-3.3-70B FP8 on 2×H100 80 GB, tensor parallel 2",
            gpus=2,
            base_step_s=0.017,
            per_seq_s=0.0001,
            per_token_s=0.00007,
            knee_tokens=128,
            per_context_token_s=0.0,
            kv_capacity_tokens=int((160 * 0.9 - 70) * _GIB / (160 * _KIB)),
            max_num_seqs=256,
            max_num_batched_tokens=2048,
            max_model_len=16384,
            rows=("F′",),
        ),
        # Llama-3.1-8B serves 128k tokens of context. The step figures are h100-llama3-8b's; the
        # attention term is the KV read at memory bandwidth (128 KiB per token at 3.35 TB/s,
        # 3.9e-8 s per token of context), which long prompts make the largest. Not checked by a
        # test: no published row measures 32k+ prompts on this setup.
        EngineProfile(
            name="h100-llama3.1-8b-128k",
            description="Llama-3.1-8B BF16 on 1×H100 80 GB with a 128k context (long prompts)",
            gpus=1,
            base_step_s=0.0074,
            per_seq_s=0.00004,
            per_token_s=0.00003,
            knee_tokens=128,
            per_context_token_s=0.000000039,
            kv_capacity_tokens=int((80 * 0.9 - 16) * _GIB / (128 * _KIB)),
            max_num_seqs=256,
            max_num_batched_tokens=8192,
            max_model_len=131072,
            rows=(),
        ),
    )
}


class ProfileError(ValueError):
    """An unknown profile name or an invalid profile file; the message says which and why."""


def get_profile(name: str, extra: dict[str, EngineProfile] | None = None) -> EngineProfile:
    """The profile called ``name`` (built in, or among ``extra``); a ``ProfileError`` lists the
    known ones."""
    known = {**PROFILES, **(extra or {})}
    try:
        return known[name]
    except KeyError:
        raise ProfileError(f"unknown profile {name!r}; known: {', '.join(sorted(known))}") from None


#: Fields of a profile file and what each must be; ``description`` and ``rows`` are optional.
_INTEGER_FIELDS = (
    "gpus",
    "knee_tokens",
    "kv_capacity_tokens",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
)
_TIME_FIELDS = ("base_step_s", "per_seq_s", "per_token_s", "per_context_token_s")


def _profile_from(entry: object, where: str) -> EngineProfile:
    if not isinstance(entry, dict):
        raise ProfileError(f"{where}: a profile must be a mapping of fields, got {type(entry).__name__}")
    known = {f.name for f in fields(EngineProfile)}
    unknown = sorted(str(k) for k in entry if k not in known)
    if unknown:
        raise ProfileError(f"{where}: unknown fields {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    missing = [k for k in ("name", *_TIME_FIELDS, *_INTEGER_FIELDS) if k not in entry]
    if missing:
        raise ProfileError(f"{where}: missing fields {', '.join(missing)}")
    name = entry["name"]
    if not isinstance(name, str) or not name.strip():
        raise ProfileError(f"{where}: name must be a non-empty string")
    where = f"{where} ({name})"
    values: dict[str, Any] = {"name": name, "description": str(entry.get("description", name))}
    for key in _INTEGER_FIELDS:
        value = entry[key]
        low = 0 if key == "knee_tokens" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ProfileError(f"{where}: {key} must be a whole number >= {low}, got {value!r}")
        values[key] = value
    for key in _TIME_FIELDS:
        value = entry[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise ProfileError(f"{where}: {key} must be a number of seconds >= 0, got {value!r}")
        values[key] = float(value)
    if values["base_step_s"] <= 0:
        raise ProfileError(f"{where}: base_step_s must be > 0")
    if values["max_num_seqs"] > values["max_num_batched_tokens"]:
        raise ProfileError(f"{where}: max_num_seqs must not exceed max_num_batched_tokens")
    rows = entry.get("rows", ())
    if not isinstance(rows, list | tuple) or not all(isinstance(r, str) for r in rows):
        raise ProfileError(f"{where}: rows must be a list of strings")
    values["rows"] = tuple(rows)
    return EngineProfile(**values)


def load_profiles(path: str | Path) -> dict[str, EngineProfile]:
    """Engine profiles from a YAML file: one mapping of ``EngineProfile`` fields, a list of them, or
    ``{profiles: [...]}``. Every problem is a ``ProfileError`` naming the file, the entry and the
    field."""
    file = Path(path)
    try:
        document = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"cannot read {file}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ProfileError(f"{file} is not valid YAML: {yaml_error_line(exc)}") from None
    if isinstance(document, dict) and "profiles" in document:
        document = document["profiles"]
    entries = document if isinstance(document, list) else [document]
    if not entries or document is None:
        raise ProfileError(f"{file}: no profile in the file")
    out: dict[str, EngineProfile] = {}
    for i, entry in enumerate(entries):
        profile = _profile_from(entry, f"{file}: profile {i + 1}")
        if profile.name in out:
            raise ProfileError(f"{file}: profile {profile.name!r} is defined twice")
        out[profile.name] = profile
    return out
