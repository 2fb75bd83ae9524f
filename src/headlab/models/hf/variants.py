"""Variants of a ``TransformersModel`` that share every module they do not change.

``with_head_view`` views layers' heads as another head count inside the attention function;
``without_heads`` removes heads from the weights (``edits.py``) and checks the result against
masking the same heads; ``with_query_key_weights`` puts new W_Q, W_K in place. Each builds the
changed modules, puts them into a copy of the module tree that shares the rest (``tree.py``)
and rebuilds the ``HFAttentionLayer`` of every layer whose module changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import torch
from torch import Tensor

from headlab.models.hf import edits
from headlab.models.hf.layer import HFAttentionLayer, keep_all, rebuilt
from headlab.models.hf.tree import replaced, view_of
from headlab.models.interface import check_layers


class TransformersModel(Protocol):
    """What a variant reads of ``adapter.TransformersModel`` (which imports this module, so it
    is named here by what it holds, not imported)."""

    name: str
    model: torch.nn.Module
    tokenizer: object
    causal: bool
    pooling: object
    layers: list[HFAttentionLayer]


def variant(
    model: TransformersModel, modules: Mapping[str, torch.nn.Module], changes: Mapping[int, dict]
) -> TransformersModel:
    """``model`` with ``modules`` in place (path -> module, every other module shared); layer
    i's HFAttentionLayer rebuilt with ``changes[i]`` where its module changed."""
    root = replaced(model.model, modules)
    layers = []
    for i, layer in enumerate(model.layers):
        module = root.get_submodule(layer.path)
        if module is layer.module:
            layers.append(layer)
        else:
            layers.append(rebuilt(layer, root, module, **changes.get(i, {})))
    keep_all(root, layers)
    return type(model)(
        model.name, root, model.tokenizer, model.causal, model.pooling, layers=layers
    )


def with_head_view(
    model: TransformersModel, num_heads: int, layers: Sequence[int] | None = None
) -> TransformersModel:
    """``TransformersModel.with_head_view``: ``layers`` (default: all) viewed as ``num_heads``
    heads; ValueError for a layer already viewed or a count that does not divide its heads."""
    chosen = check_layers(range(model.num_layers) if layers is None else layers, model.num_layers)
    modules, changes = {}, {}
    for i in chosen:
        layer = model.layers[i]
        if layer.view is not None:
            raise ValueError(f"layer {i} is a view already; view the original model")
        if num_heads <= 0 or layer.num_heads % num_heads:
            raise ValueError(
                f"num_heads must divide the {layer.num_heads} query heads of layer {i}, "
                f"got {num_heads}"
            )
        if num_heads == layer.num_heads:
            continue
        modules[layer.path] = view_of(layer.module)
        changes[i] = {
            "view": num_heads,
            "num_heads": num_heads,
            "num_kv_heads": min(num_heads, layer.num_kv_heads),
            "head_dim": layer.head_dim * layer.num_heads // num_heads,
        }
    return variant(model, modules, changes)


def without_heads(
    model: TransformersModel, heads: Mapping[int, Iterable[int]]
) -> TransformersModel:
    """``TransformersModel.without_heads``: the heads removed from the weights, checked against
    masking them on a short input (ValueError naming the family when they differ)."""
    check_layers(heads, model.num_layers)
    modules, changes = {}, {}
    for i, removed in heads.items():
        if not set(removed):
            continue
        layer = model.layers[i]
        removal = edits.without_heads(layer, removed)
        modules.update(removal.modules)
        changes[i] = removed_sizes(removal, layer.head_dim)
    smaller = variant(model, modules, changes)
    check_removal(model, smaller, heads)
    return smaller


def check_removal(
    model: TransformersModel, smaller: TransformersModel, heads: Mapping[int, Iterable[int]]
) -> None:
    """ValueError unless ``smaller`` computes what ``model`` computes with ``heads``' mask at 0,
    on one short input."""
    from headlab.models.head_mask import as_mask

    ids = (torch.arange(1, 6) % int(model.config.vocab_size))[None]
    mask = torch.ones_like(ids)
    try:
        with torch.no_grad():
            with model._head_masks(as_mask(model, heads)):
                expected = model._outputs(ids, mask)
            got = smaller._outputs(ids, mask)
        tolerance = 1e-4 if expected.dtype == torch.float32 else 5e-2
        scale = float(expected.abs().max()) + 1e-6
        same = got.shape == expected.shape and float((got - expected).abs().max()) <= (
            tolerance * scale
        )
    except RuntimeError as error:
        same, why = False, f"its forward fails ({str(error).splitlines()[0]})"
    else:
        why = "its output differs from masking the same heads"
    if not same:
        raise ValueError(
            f"family {model.family!r}: heads cannot be removed from its weights: {why}; "
            "prune by masking instead (by=mask)"
        )


def with_query_key_weights(
    model: TransformersModel, weights: Mapping[int, tuple[Tensor, Tensor]]
) -> TransformersModel:
    """``TransformersModel.with_query_key_weights``: layer i's W_Q and W_K replaced by
    ``weights[i]``, wherever the projections hold them (fused ones too)."""
    check_layers(weights, model.num_layers)
    modules = {}
    for i, (w_q, w_k) in weights.items():
        modules.update(edits.with_query_key(model.layers[i], w_q, w_k))
    return variant(model, modules, {})


def removed_sizes(removal: edits.Removal, d: int) -> dict:
    """The changes of ``rebuilt`` for a layer that lost heads (d: its head_dim): its sizes and
    its projections' rows."""
    if removal.heads == 0:
        gone = "every head was removed"
        return {
            "num_heads": 0,
            "num_kv_heads": 0,
            "output": None,
            "query": gone,
            "key": gone,
            "value": gone,
        }
    q_rows, kv_rows = tuple(range(removal.heads * d)), tuple(range(removal.kv_heads * d))
    return {
        "num_heads": removal.heads,
        "num_kv_heads": removal.kv_heads,
        "copied_parameters": removal.copied,
        "rows": {"output": q_rows, "query": q_rows, "key": kv_rows, "value": kv_rows},
    }
