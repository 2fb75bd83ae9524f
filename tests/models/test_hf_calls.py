"""What transformers hands headlab's registered attention, family by family (docs/transformers.md).

A recorder stands in front of headlab's function for one forward of a right-padded batch and
keeps, for each call: the module, query/key/value shapes and the keywords. The table in the docs
is this test's expectations.
"""

from __future__ import annotations

import pytest
import torch
from hf_families import FAMILIES, WINDOW, text

from headlab.models.hf.attention_function import headlab_attention
from headlab.models.hf.lazy_mask import LazyMask
from headlab.models.hf.registry import NAME

#: family -> (attention module class, output projection attribute path, q/k/v layout)
LAYOUT = {
    "llama": ("LlamaAttention", "o_proj", "q_proj/k_proj/v_proj"),
    "mistral": ("MistralAttention", "o_proj", "q_proj/k_proj/v_proj"),
    "qwen2": ("Qwen2Attention", "o_proj", "q_proj/k_proj/v_proj"),
    "qwen3": ("Qwen3Attention", "o_proj", "q_proj/k_proj/v_proj"),
    "qwen3_moe": ("Qwen3MoeAttention", "o_proj", "q_proj/k_proj/v_proj"),
    "gemma2": ("Gemma2Attention", "o_proj", "q_proj/k_proj/v_proj"),
    "gemma3_text": ("Gemma3Attention", "o_proj", "q_proj/k_proj/v_proj"),
    "phi3": ("Phi3Attention", "o_proj", "qkv_proj"),
    "olmo2": ("Olmo2Attention", "o_proj", "q_proj/k_proj/v_proj"),
    "gpt2": ("GPT2Attention", "c_proj", "c_attn"),
    "gpt_neox": ("GPTNeoXAttention", "dense", "query_key_value"),
    "gpt_oss": ("GptOssAttention", "o_proj", "q_proj/k_proj/v_proj"),
    "bert": ("BertSelfAttention", None, "query/key/value"),  # output: BertSelfOutput.dense
}
#: family -> the keywords (beyond scaling and dropout) its attention passes, with a value
EXTRA = {
    "mistral": {"sliding_window"},
    "qwen2": {"sliding_window"},
    "qwen3": {"sliding_window"},
    "qwen3_moe": {"sliding_window"},
    "gemma2": {"sliding_window", "softcap"},
    "gemma3_text": {"sliding_window"},
    "phi3": {"sliding_window"},
    "gpt_oss": {"sliding_window", "s_aux"},
}
SLIDING = {"mistral": [0, 1], "gemma2": [0, 2], "gemma3_text": [0, 2], "gpt_oss": [0]}


def record(model, batch, monkeypatch):
    from transformers import AttentionInterface

    calls = []

    def recorder(module, query, key, value, attention_mask, **kwargs):
        calls.append((module, query.shape, key.shape, value.shape, attention_mask, kwargs))
        return headlab_attention(module, query, key, value, attention_mask, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, NAME, recorder)
    with torch.no_grad():
        model.run(batch)
    return calls


@pytest.mark.parametrize("name", FAMILIES)
def test_what_the_registered_function_receives(name, hf_loaded, monkeypatch):
    model = hf_loaded(name)
    config = model.config
    batch = model.tokenize([text(11), text(6, 1)])  # right-padded: 11 and 6 real tokens
    calls = record(model, batch, monkeypatch)
    module_class, out_proj, qkv = LAYOUT[name]
    assert len(calls) == config.num_hidden_layers
    heads, kv_heads = model.heads_per_layer[0], model.kv_heads_per_layer[0]
    d_head = getattr(config, "head_dim", None) or config.hidden_size // heads
    for layer, (module, q, k, v, mask, kwargs) in enumerate(calls):
        assert type(module).__name__ == module_class
        assert module.layer_idx == layer
        assert module.is_causal is FAMILIES[name].causal
        # per head, after rotary and QK-norm; K/V not repeated for grouped heads
        assert tuple(q) == (2, heads, 11, d_head)
        assert tuple(k) == tuple(v) == (2, kv_heads, 11, d_head)
        if kv_heads != heads:
            assert module.num_key_value_groups == heads // kv_heads
        assert isinstance(mask, LazyMask) and mask.kind == "rows"  # padding: rows are built
        assert kwargs["scaling"] == pytest.approx(module.scaling)
        assert kwargs["dropout"] == 0.0
        assert {k for k, v in kwargs.items() if v is not None} - {"scaling", "dropout"} <= (
            EXTRA.get(name, set()) | {"use_cache", "output_router_logits", "position_ids"}
        )
        window = WINDOW if layer in SLIDING.get(name, []) else None
        assert kwargs.get("sliding_window") == window
        if name == "gemma2":
            assert kwargs["softcap"] == config.attn_logit_softcapping == 1.5
        if name == "gpt_oss":
            assert kwargs["s_aux"] is module.sinks and tuple(module.sinks.shape) == (heads,)
        assert all(isinstance(getattr(module, p), torch.nn.Module) for p in qkv.split("/"))
        if out_proj is not None:
            assert isinstance(getattr(module, out_proj), torch.nn.Module)


def test_unpadded_batches_take_the_cheap_masks(hf_loaded, monkeypatch):
    """No padding and no window that bites: causal with an offset, or no mask at all (BERT)."""
    for name, kind in (("llama", "causal"), ("bert", "full"), ("mistral", "rows")):
        model = hf_loaded(name)
        calls = record(model, model.tokenize([text(9)]), monkeypatch)
        assert {call[4].kind for call in calls} == {kind}, name
