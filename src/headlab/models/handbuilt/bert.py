"""BERT's encoder in plain torch, read from a transformers ``BertModel`` state_dict.

    x = LayerNorm(word[ids] + position[0..pos) + token_type[types])      (batch, pos, d_model)
    for each layer (post-norm):
        x = LayerNorm(x + W_O attention(x W_Q + b_Q, x W_K + b_K, x W_V + b_V) + b_O)
        x = LayerNorm(x + W_2 act(W_1 x + b_1) + b_2)
    hidden_states = x

Padded keys (``attention_mask`` False) get no weight. The tensor names are those of
``BertModel.state_dict()`` (a ``bert.`` prefix, as in ``BertForMaskedLM``, is accepted); the
sizes come from the tensors, the rest (eps, activation) from the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.models.handbuilt.dot_product_attention import attention

QKV = ("query", "key", "value")
ACTIVATIONS = {
    "gelu": F.gelu,  # the erf form, transformers' "gelu"
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}


@dataclass(frozen=True)
class BertOutput:
    """hidden_states: (batch, pos, d_model), the last layer's output; attentions: one
    (batch, head, q_pos, k_pos) tensor of attention weights per layer."""

    hidden_states: Tensor
    attentions: list[Tensor]


def _prefixed(state: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
    """``state`` with a leading ``bert.`` taken off its names, when it has one."""
    if "embeddings.word_embeddings.weight" in state:
        return state
    return {k.removeprefix("bert."): v for k, v in state.items()}


def _linear(state: Mapping[str, Tensor], name: str, x: Tensor) -> Tensor:
    """x W^T + b with the weight and bias of the nn.Linear called ``name``."""
    return F.linear(x, state[f"{name}.weight"], state[f"{name}.bias"])


def _layer_norm(state: Mapping[str, Tensor], name: str, x: Tensor, eps: float) -> Tensor:
    weight = state[f"{name}.weight"]
    return F.layer_norm(x, weight.shape, weight, state[f"{name}.bias"], eps)


def bert_forward(
    state: Mapping[str, Tensor],
    config,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
) -> BertOutput:
    """The encoder's output for ``input_ids`` (batch, pos).

    state: a ``BertModel`` state_dict; config: its ``transformers.BertConfig`` (or anything with
    ``num_attention_heads``, ``num_hidden_layers``, ``layer_norm_eps`` and ``hidden_act``).
    attention_mask: (batch, pos), nonzero on real tokens (default: all real); token_type_ids:
    (batch, pos) (default: all 0). Computes in the dtype of the weights. ValueError naming the
    setting for an activation or position embedding this reference does not implement.
    """
    act = ACTIVATIONS.get(config.hidden_act)
    if act is None:
        expected = sorted(ACTIVATIONS)
        raise ValueError(f"hidden_act must be one of {expected}, got {config.hidden_act!r}")
    kind = getattr(config, "position_embedding_type", "absolute") or "absolute"
    if kind != "absolute":
        raise ValueError(f"position_embedding_type must be 'absolute', got {kind!r}")
    s, eps = _prefixed(state), config.layer_norm_eps
    batch, pos = input_ids.shape
    heads = config.num_attention_heads
    if attention_mask is None:
        attention_mask = torch.ones(batch, pos, dtype=torch.bool)
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    allowed = attention_mask.bool()[:, None, None, :]  # (batch, 1, 1, k_pos): real keys

    x = (
        s["embeddings.word_embeddings.weight"][input_ids]
        + s["embeddings.position_embeddings.weight"][:pos]
        + s["embeddings.token_type_embeddings.weight"][token_type_ids]
    )
    x = _layer_norm(s, "embeddings.LayerNorm", x, eps)  # (batch, pos, d_model)

    def split(t: Tensor) -> Tensor:  # (batch, pos, d_model) -> (batch, head, pos, d_head)
        return t.view(batch, pos, heads, -1).transpose(1, 2)

    attentions = []
    for i in range(config.num_hidden_layers):
        p = f"encoder.layer.{i}."
        q, k, v = (split(_linear(s, f"{p}attention.self.{n}", x)) for n in QKV)
        out, weights = attention(q, k, v, allowed)  # (batch, head, q_pos, d_head)
        out = out.transpose(1, 2).reshape(batch, pos, -1)  # (batch, q_pos, d_model): heads in a row
        x = _layer_norm(
            s,
            f"{p}attention.output.LayerNorm",
            x + _linear(s, f"{p}attention.output.dense", out),
            eps,
        )
        hidden = act(_linear(s, f"{p}intermediate.dense", x))  # (batch, pos, intermediate)
        x = _layer_norm(s, f"{p}output.LayerNorm", x + _linear(s, f"{p}output.dense", hidden), eps)
        attentions.append(weights)
    return BertOutput(hidden_states=x, attentions=attentions)
