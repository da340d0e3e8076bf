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

from dataclasses import dataclass


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
    )
}


def get_profile(name: str) -> EngineProfile:
    """The profile called ``name``; a ``KeyError`` lists the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r}; known: {', '.join(sorted(PROFILES))}") from None
