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

A keyword that changes the math and that this function does not know is refused rather than
ignored, so that a family is exact or fails loudly.

What headlab adds comes from the module itself: its ``HFAttentionLayer`` (layer.py, kept on the
module) gives the kernel its sites (interventions, statistics requests with the layer's W_O, a
key budget), this forward's head mask and its head view; a module without one runs plain.
"""

from __future__ import annotations

import torch
from torch import Tensor

from headlab.attention.kernel import attend
from headlab.attention.mask_spec import MaskSpec
from headlab.models.hf.layer import layer_of
from headlab.models.hf.lazy_mask import as_mask_spec
from headlab.models.hf.probe import RECORDER

#: Keywords transformers passes that do not change the attention's math.
PASSIVE = frozenset(
    {
        "sliding_window",  # the mask already holds the window (transformers' eager ignores it too)
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "output_router_logits",
        "position_ids",
        "cache_position",
        "encoder_hidden_states",
        "return_dict",
    }
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
    unknown = sorted(k for k, v in kwargs.items() if k not in PASSIVE and v is not None)
    if unknown:
        raise ValueError(
            f"headlab's attention does not know the keyword(s) {', '.join(unknown)} that "
            f"{type(module).__name__} passed; expected only {', '.join(sorted(PASSIVE))} besides "
            "scaling, dropout, softcap, s_aux, is_causal and position_bias"
        )
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
        scale=scaling,
        softcap=softcap,
        sinks=s_aux,
        dropout_p=dropout if module.training else 0.0,
        need_weights="heads" if kwargs.get("output_attentions") else None,
        **state,
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
