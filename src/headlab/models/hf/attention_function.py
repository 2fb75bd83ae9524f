"""headlab's attention as transformers calls it: ``AttentionInterface``'s signature -> the kernel.

transformers calls, from each attention module of a model loaded with
``attn_implementation="headlab"``::

    fn(module, query, key, value, attention_mask, *, scaling, dropout, **kwargs)
        query: (batch, head, q_pos, d_head)        after rotary positions and QK-norm
        key:   (batch, kv_head, k_pos, d_head)     after rotary and the cache update, not repeated
        value: (batch, kv_head, k_pos, d_value)
        attention_mask: headlab's LazyMask (lazy_mask.py), a 4-D tensor, or None
        kwargs: softcap (Gemma 2), s_aux (gpt-oss sinks, (head,)), sliding_window (informational:
                the mask already holds the window), is_causal, position_bias (T5-style, added)
    -> (attn_output (batch, q_pos, head, d_value) contiguous, weights (batch, head, q_pos, k_pos)
        when ``output_attentions`` was asked, else None)

Keywords, decided against transformers' own functions (``integrations/sdpa_attention.py``, each
family's ``eager_attention_forward``): everything a model's ``**kwargs`` carry down that cannot
change the attention is accepted and ignored, as SDPA ignores it (``labels``, ``shift_labels``,
``num_items_in_batch`` from the ``Trainer``, ``use_cache``, ...). The keywords that change the math
in some transformers attention function are either implemented here (``IMPLEMENTED``) or refused by
name (``REFUSED``, with what they would have changed), so that a family is exact or fails loudly;
``PASSIVE`` lists the keywords that families pass explicitly and that change nothing here, with why.
A test reads transformers' sources and fails on a keyword in none of the three lists.

What headlab adds comes from the module itself: its ``HFAttentionLayer`` (layer.py, kept on the
module) gives the kernel its sites (interventions, statistics requests with the layer's W_O, a
key budget), this forward's head mask and its head view; a module without one runs plain.
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.attention.kernel import AttendOptions, attend
from headlab.attention.mask_spec import MaskSpec
from headlab.models.hf.layer import layer_of
from headlab.models.hf.lazy_mask import as_mask_spec
from headlab.models.hf.probe import RECORDER

#: Keywords this function implements (its parameters, and ``output_attentions``: weights returned).
IMPLEMENTED = frozenset(
    {"scaling", "dropout", "softcap", "s_aux", "is_causal", "position_bias", "output_attentions"}
)

#: Keywords that change the attention in a transformers attention function and that headlab does
#: not implement: refused when not None, each with what it would change.
REFUSED = {
    "sinks": "per-token attention sinks (Inkling 2); headlab implements per-head sinks (s_aux)",
    "indices": "sparse attention over each query's selected keys (DeepSeek V3.2's indexer)",
    "block_indices": "block-sparse attention over each query's selected key blocks",
    "block_table": "a paged cache (keys and values held in cache blocks, not passed)",
}

#: Keywords families pass explicitly that change nothing here, and why (any other keyword, such as
#: ``labels`` or ``num_items_in_batch`` carried down from the model's call, is accepted as well).
PASSIVE = {
    "sliding_window": "the mask already holds the window (transformers' eager ignores it too)",
    "cu_seq_lens_q": "flash attention's packed sequences; the mask holds their boundaries",
    "cu_seq_lens_k": "flash attention's packed sequences; the mask holds their boundaries",
    "max_length_q": "flash attention's packed sequences; the mask holds their boundaries",
    "max_length_k": "flash attention's packed sequences; the mask holds their boundaries",
    "position_ids": "positions are in the query and key already (rotary applied)",
    "cache_position": "positions are in the query and key already, offsets in the mask",
    "deterministic": "flash attention's choice of kernel",
    "kernel_options": "flex attention's choice of kernel",
    "cache": "the keys and values passed are already the cache's",
}


def refuse_unknown_math(module: torch.nn.Module, kwargs: dict) -> None:
    """ValueError naming the keywords in ``kwargs`` that would change the attention and that
    headlab does not implement (``REFUSED``); every other keyword is accepted."""
    refused = sorted(k for k, v in kwargs.items() if k in REFUSED and v is not None)
    if refused:
        reasons = "; ".join(f"{k}: {REFUSED[k]}" for k in refused)
        raise ValueError(
            f"{type(module).__name__} passed {', '.join(refused)} to the attention, which would "
            f"change it and which headlab's attention does not implement ({reasons})"
        )


def _module_causal(module: torch.nn.Module, is_causal: bool | None) -> bool:
    """transformers' SDPA rule: the ``is_causal`` keyword if given, else the module's flag."""
    return bool(is_causal) if is_causal is not None else bool(getattr(module, "is_causal", True))


def headlab_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: object,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    s_aux: Tensor | None = None,
    is_causal: bool | None = None,
    position_bias: Tensor | None = None,
    **kwargs: object,
) -> tuple[Tensor, Tensor | None]:
    """The function registered in ``AttentionInterface`` (see the module docstring)."""
    refuse_unknown_math(module, kwargs)
    spec = as_mask_spec(
        attention_mask, _module_causal(module, is_causal), query.shape[2], key.shape[2]
    )
    if position_bias is not None:
        spec = _with_bias(spec, position_bias)
    layer = layer_of(module)
    state = {}
    if layer is not None:
        state = {
            "sites": layer.sites,
            "head_scale": layer.head_scale(query.shape[0], query.shape[1], query.dtype),
            "head_view": layer.view,
            "statistics": layer.statistics_request(),
        }
    result = attend(
        query,
        key,
        value,
        spec,
        AttendOptions(
            scale=scaling,
            softcap=softcap,
            sinks=s_aux,
            dropout_p=dropout if module.training else 0.0,
            need_weights="heads" if kwargs.get("output_attentions") else None,
            **state,
        ),
    )
    # (batch, head, q_pos, d_value) -> (batch, q_pos, head, d_value), as every family reshapes it
    out = result.head_out.transpose(1, 2).contiguous()
    recorder = RECORDER.get()
    if recorder is not None:  # the probe (probe.py) finds the module's sizes and projections
        recorder.attention(module, query, key, value, out)
    return out, result.weights


def _with_bias(spec: MaskSpec | None, bias: Tensor) -> MaskSpec:
    from dataclasses import replace

    return MaskSpec(bias=bias) if spec is None else replace(spec, bias=bias)
