"""A tiny Llama-style model with random weights and a byte-level BPE tokenizer, made offline.

Weights cannot be downloaded here, and the metric contract does not care what the model says: it
needs a real engine running a real forward pass. This builds, deterministically from a seed, a
2-layer Llama of width 128 (``transformers``) and a tokenizer trained on generated text
(``tokenizers``), and saves both as a Hugging Face model directory vLLM loads with ``--model DIR``.

Runs in the engine env's interpreter (it needs torch, transformers and tokenizers):
``<engine python> e2e/engine/tiny_model.py OUT_DIR``. Stdlib-only at import time, so the test tier can
read the constants without the engine env.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Final

#: The model's shape. head_dim = 128 / 2 = 64, a size every vLLM CPU attention backend supports.
HIDDEN: Final = 128
LAYERS: Final = 2
HEADS: Final = 2
KV_HEADS: Final = 2
INTERMEDIATE: Final = 352
MAX_POSITIONS: Final = 2048
VOCAB: Final = 2048
SEED: Final = 20261122
SPECIAL: Final = ("<s>", "</s>", "<unk>")
#: Written into the directory; the builder skips work when a directory with the same stamp exists.
STAMP: Final = f"tailguard-tiny-llama-h{HIDDEN}-l{LAYERS}-v{VOCAB}-s{SEED}"

_SYLLABLES = (
    "ka", "to", "ri", "ne", "mo", "sa", "lu", "pe", "di", "go", "an", "el", "or", "ut", "is",
    "ba", "ve", "zu", "qui", "thr", "st", "ing", "tion", "er", "ly", "ed", "ma", "no", "re", "se",
)  # fmt: skip


def corpus(lines: int = 4000, seed: int = SEED) -> list[str]:
    """Generated text: pseudo-words from syllables, punctuation and digits, all bytes ASCII."""
    rng = random.Random(seed)
    words = ["".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(800)]
    out = []
    for _ in range(lines):
        n = rng.randint(5, 25)
        sentence = " ".join(rng.choice(words) for _ in range(n))
        out.append(sentence.capitalize() + rng.choice((".", "!", "?", ", 42.", " - 7;")))
    return out


def prompt(index: int, words: int) -> str:
    """A deterministic prompt of about ``words`` pseudo-words (for the load client)."""
    rng = random.Random(SEED + index)
    text = corpus(lines=8, seed=SEED + 1)
    pool = " ".join(text).split()
    return " ".join(rng.choice(pool) for _ in range(words))


def build(out: Path) -> Path:
    """Write the model directory (config, safetensors weights, tokenizer) to ``out``; returns it."""
    stamp_file = out / "tailguard-model.json"
    if stamp_file.exists() and json.loads(stamp_file.read_text()).get("stamp") == STAMP:
        return out
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=MAX_POSITIONS,
    )
    fast.save_pretrained(out)

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    stamp_file.write_text(
        json.dumps({"stamp": STAMP, "parameters": params, "vocab": tok.get_vocab_size()}, indent=2) + "\n"
    )
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py OUT_DIR")
    print(build(Path(sys.argv[1])))
