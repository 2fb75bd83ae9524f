"""Tiny random transformers checkpoints, one per family, each with its distinguishing feature.

``write_family(name, folder)`` builds the model with transformers itself
(``AutoConfig.for_model`` + the family's model class), seeded, and writes ``config.json``,
``model.safetensors`` and a word-level ``tokenizer.json`` (words ``w0`` .. ``w{VOCAB-1}``,
whitespace split) into ``folder``. Sizes are tiny and distinct (heads != kv_heads != layers),
so that a swapped axis fails a test instead of passing by symmetry.

Every family's test text (``text(n)``) is longer than its sliding windows, so that a window is
exercised. Parameters that transformers initialises to constants (norm weights, biases, sinks)
are redrawn, so that a path that drops them gives another answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

VOCAB = 101
WINDOW = 4  # sliding windows (Mistral, Gemma 2/3, gpt-oss): shorter than every test text


@dataclass(frozen=True)
class Family:
    """One family: its model_type, the config overrides, and what it exercises."""

    model_type: str
    overrides: dict = field(default_factory=dict)
    feature: str = ""
    causal: bool = True


_GQA = {"hidden_size": 48, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 8}
_DECODER = {
    "num_hidden_layers": 2,
    "intermediate_size": 37,
    "max_position_embeddings": 64,
    "tie_word_embeddings": False,
}

FAMILIES: dict[str, Family] = {
    "llama": Family("llama", {**_GQA, **_DECODER}, "grouped K/V heads (6 on 2)"),
    "mistral": Family(
        "mistral", {**_GQA, **_DECODER, "sliding_window": WINDOW}, f"sliding window {WINDOW}"
    ),
    "qwen2": Family("qwen2", {**_GQA, **_DECODER}, "biased q/k/v projections"),
    "qwen3": Family("qwen3", {**_GQA, **_DECODER, "head_dim": 10}, "QK-norm, head_dim 10 != 48/6"),
    "qwen3_moe": Family(
        "qwen3_moe",
        {
            **_GQA,
            **_DECODER,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 20,  # grouped_mm on CPU: strides of 16 bytes
            "decoder_sparse_step": 1,
            "norm_topk_prob": True,
        },
        "mixture of experts (4, top 2), QK-norm",
    ),
    "gemma2": Family(
        "gemma2",
        {
            **_GQA,
            **_DECODER,
            "num_hidden_layers": 3,
            "sliding_window": WINDOW,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "attn_logit_softcapping": 1.5,
            "final_logit_softcapping": 30.0,
            "query_pre_attn_scalar": 6,
        },
        f"logit soft-cap 1.5, sliding window {WINDOW} on layers 0 and 2",
    ),
    "gemma3_text": Family(
        "gemma3_text",
        {
            **_GQA,
            **_DECODER,
            "num_hidden_layers": 3,
            "sliding_window": WINDOW,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
            "query_pre_attn_scalar": 6,
        },
        f"QK-norm, sliding window {WINDOW} on layers 0 and 2",
    ),
    "phi3": Family(
        "phi3",
        {**_GQA, **_DECODER, "partial_rotary_factor": 0.5},
        "fused qkv_proj, partial rotary (half of each head)",
    ),
    "olmo2": Family("olmo2", {**_GQA, **_DECODER}, "QK-norm over all heads at once"),
    "gpt2": Family(
        "gpt2",
        {"n_embd": 30, "n_head": 3, "n_layer": 2, "n_inner": 37, "n_positions": 64},
        "learned positions, biased fused c_attn (Conv1D)",
    ),
    "gpt_neox": Family(
        "gpt_neox",
        {
            "hidden_size": 40,
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "intermediate_size": 37,
            "max_position_embeddings": 64,
            "rotary_pct": 0.5,
            "tie_word_embeddings": False,
        },
        "biased fused query_key_value (per head), partial rotary 0.5",
    ),
    "gpt_oss": Family(
        "gpt_oss",
        {
            **_GQA,
            **_DECODER,
            "sliding_window": WINDOW,
            "layer_types": ["sliding_attention", "full_attention"],
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "intermediate_size": 16,
            "rope_parameters": {"rope_type": "default", "rope_theta": 150000.0},
        },
        f"attention sinks (s_aux), sliding window {WINDOW} on layer 0, experts",
    ),
    "bert": Family(
        "bert",
        {
            "hidden_size": 36,
            "num_attention_heads": 3,
            "num_hidden_layers": 2,
            "intermediate_size": 37,
            "max_position_embeddings": 64,
            "type_vocab_size": 2,
        },
        "bidirectional, learned positions",
        causal=False,
    ),
}


#: Families kept out of the per-family parametrisations, each for a test of its own.
OTHER_FAMILIES: dict[str, Family] = {
    "lfm3": Family(
        "lfm3",
        {
            **_GQA,
            **_DECODER,
            "num_hidden_layers": 3,
            "layer_types": ["conv", "full_attention", "sliding_attention"],
            "sliding_window": WINDOW,
        },
        "a sigmoid gate per head on the attention's output before o_proj (no W_O of the heads), "
        f"QK-norm, a convolution layer, sliding window {WINDOW} on layer 2",
    ),
}


#: Families whose classes do not set ``_supports_attention_backend`` but call the interface
#: (found by observing a forward, models/hf/observe.py): StableLM, and hybrids whose attention
#: layers sit between state-space (Mamba) or linear-attention layers.
_MAMBA = {"mamba_d_state": 4, "mamba_d_conv": 3, "mamba_expand": 2}
_MAMBA2 = {
    **_MAMBA,
    "mamba_n_heads": 4,
    "mamba_d_head": 24,
    "mamba_n_groups": 1,
    "mamba_chunk_size": 4,
}
OBSERVED_FAMILIES: dict[str, Family] = {
    "stablelm": Family(
        "stablelm",
        {**_GQA, **_DECODER, "partial_rotary_factor": 0.5, "use_qkv_bias": True},
        "no class flag; partial rotary 0.5, biased q/k/v",
    ),
    "jamba": Family(
        "jamba",
        {
            **_GQA,
            **_DECODER,
            **_MAMBA,
            "num_hidden_layers": 4,
            "attn_layer_period": 2,
            "attn_layer_offset": 1,
            "expert_layer_period": 2,
            "expert_layer_offset": 1,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "intermediate_size": 20,  # grouped_mm on CPU: strides of 16 bytes
            "mamba_dt_rank": 4,
            "use_mamba_kernels": False,
        },
        "hybrid: Mamba layers 0 and 2, attention layers 1 and 3, experts",
    ),
    "bamba": Family(
        "bamba",
        {**_GQA, **_DECODER, **_MAMBA2, "num_hidden_layers": 3, "attn_layer_indices": [1]},
        "hybrid: Mamba-2 layers 0 and 2, attention layer 1",
    ),
    "falcon_h1": Family(
        "falcon_h1",
        {**_GQA, **_DECODER, **_MAMBA2, "mamba_d_ssm": 96},
        "hybrid: attention and Mamba-2 side by side in every layer",
    ),
    "qwen3_next": Family(
        "qwen3_next",
        {
            **_GQA,
            **_DECODER,
            "layer_types": ["linear_attention", "full_attention"],
            "linear_num_value_heads": 4,
            "linear_num_key_heads": 2,
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 16,
        },
        "hybrid: linear attention (gated delta rule) layer 0, gated attention layer 1",
    ),
}


def family(name: str) -> Family:
    for table in (FAMILIES, OTHER_FAMILIES, OBSERVED_FAMILIES):
        if name in table:
            return table[name]
    raise KeyError(name)


def model_class(family: Family):
    """The transformers class the checkpoint is written with (and compared against)."""
    import transformers

    if family.causal:
        return transformers.AutoModelForCausalLM
    return transformers.AutoModel


#: Special token ids inside the tiny vocabulary (the defaults, e.g. GPT-2's 50256, are not).
TOKENS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


def config(name: str):
    """The transformers config of family ``name``."""
    import transformers

    chosen = family(name)
    return transformers.AutoConfig.for_model(
        chosen.model_type, vocab_size=VOCAB, **TOKENS, **chosen.overrides
    )


def build(name: str, seed: int = 5):
    """A seeded random transformers model of family ``name`` (float32, eval mode)."""
    torch.manual_seed(seed)
    model = model_class(family(name)).from_config(config(name), dtype=torch.float32).eval()
    with torch.no_grad():  # constants of the init (norms, biases, sinks) become random
        for parameter in model.parameters():
            if parameter.ndim == 1:
                parameter.normal_(0.3, 0.4)
    return model


def write_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer over ``w0`` .. ``w{VOCAB-1}`` (``w0`` is the unknown word)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def write_family(name: str, folder: Path, seed: int = 5) -> Path:
    """``folder`` holding family ``name``'s checkpoint (safetensors) and tokenizer."""
    folder.mkdir(parents=True, exist_ok=True)
    build(name, seed).save_pretrained(folder, safe_serialization=True)
    write_tokenizer(folder)
    return folder


def text(n: int, seed: int = 0) -> str:
    """``n`` words of the tokenizer's vocabulary (never the unknown word), seeded."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (n,), generator=generator)
    return " ".join(f"w{int(i)}" for i in ids)


def padded(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Three texts of 11, 7 and 2 tokens, padded on the right: (ids, mask) (batch, pos)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (3, 11), generator=generator)
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, 2:] = 0
    return ids, mask
