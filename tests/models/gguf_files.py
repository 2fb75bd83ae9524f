"""Small llama-architecture GGUF files written with the ``gguf`` package's own writer.

``write_llama_gguf(path)`` writes a random decoder of distinct sizes (4 query heads of 6 on 2
K/V heads, width 24, FFN 20, 2 layers, 29 tokens); ``metadata`` overrides or (with None) removes
a key, ``tensors`` replaces or (with None) removes a tensor, so tests can write malformed files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HEADS, KV_HEADS, HEAD_DIM, WIDTH, FFN, LAYERS = 4, 2, 6, 24, 20, 2
TOKENS = [*"abcdefghijklmnopqrstuvwxyz", "ab", "cd", "ef"]
MERGES = ["a b", "c d", "e f"]


def base_metadata() -> dict[str, object]:
    return {
        "llama.block_count": LAYERS,
        "llama.context_length": 64,
        "llama.embedding_length": WIDTH,
        "llama.feed_forward_length": FFN,
        "llama.attention.head_count": HEADS,
        "llama.attention.head_count_kv": KV_HEADS,
        "llama.rope.freq_base": 500.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": TOKENS,
        "tokenizer.ggml.merges": MERGES,
        "tokenizer.ggml.eos_token_id": 1,
    }


def base_tensors(seed: int = 0) -> dict[str, np.ndarray]:
    """GGUF tensor name -> float32 array in PyTorch layout (out_features, in_features)."""
    rng = np.random.default_rng(seed)

    def draw(*shape: int) -> np.ndarray:
        return (0.3 * rng.standard_normal(shape)).astype(np.float32)

    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    tensors = {"token_embd.weight": draw(len(TOKENS), WIDTH), "output_norm.weight": draw(WIDTH)}
    for i in range(LAYERS):
        tensors |= {
            f"blk.{i}.attn_norm.weight": 1 + draw(WIDTH),
            f"blk.{i}.attn_q.weight": draw(q, WIDTH),
            f"blk.{i}.attn_k.weight": draw(kv, WIDTH),
            f"blk.{i}.attn_v.weight": draw(kv, WIDTH),
            f"blk.{i}.attn_output.weight": draw(WIDTH, q),
            f"blk.{i}.ffn_norm.weight": 1 + draw(WIDTH),
            f"blk.{i}.ffn_gate.weight": draw(FFN, WIDTH),
            f"blk.{i}.ffn_up.weight": draw(FFN, WIDTH),
            f"blk.{i}.ffn_down.weight": draw(WIDTH, FFN),
        }
    return tensors


def _add(writer, key: str, value: object) -> None:
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value) if value >= 0 else writer.add_int32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    else:
        writer.add_array(key, list(value))  # type: ignore[arg-type]


def write_llama_gguf(
    path: Path,
    metadata: dict[str, object] | None = None,
    tensors: dict[str, np.ndarray | None] | None = None,
) -> Path:
    """Write the decoder above to ``path`` with ``metadata`` and ``tensors`` changed."""
    import gguf

    keys = {**base_metadata(), **(metadata or {})}
    arrays = {**base_tensors(), **(tensors or {})}
    writer = gguf.GGUFWriter(str(path), "llama")
    for key, value in keys.items():
        if value is not None:
            _add(writer, key, value)
    for name, array in arrays.items():
        if array is not None:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
