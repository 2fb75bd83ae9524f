"""Where a model's attention layers sit among its blocks: a hybrid's other blocks have no heads.

headlab's layers are the modules that call the attention function (probe.py), in call order.
In most families that is one per block of the model's layer list. In a hybrid (Jamba, Bamba,
Qwen3-Next, LFM: state-space, linear-attention or convolution blocks between attention blocks)
some blocks call nothing, so "layer 1" of a table is not the model's block 1. ``layer_note``
says so in one line, which the analyses put in their results' notes (the tables' ``note:``
lines, the report):

    attention layers 0, 1 are the model's blocks 1, 3 (of 4, model.layers); blocks 0, 2
    (linear_attention) have no heads

A block is named by the config's ``layer_types`` where it has one entry per block
(transformers' own words: "linear_attention", "conv", "mamba", ...), else by its class.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from headlab.models.hf.layer import HFAttentionLayer


def _block_of(model: nn.Module, path: str) -> tuple[str, int] | None:
    """(the path of the outermost ModuleList above ``path``, the block's index in it)."""
    parts = path.split(".")
    for end in range(1, len(parts)):
        prefix = ".".join(parts[:end])
        if parts[end].isdigit() and isinstance(model.get_submodule(prefix), nn.ModuleList):
            return prefix, int(parts[end])
    return None


def _kind(model: nn.Module, blocks: nn.ModuleList, index: int) -> str:
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    types = getattr(text, "layer_types", None)
    if isinstance(types, list | tuple) and len(types) == len(blocks):
        return str(types[index])
    return type(blocks[index]).__name__


def _numbers(values: Sequence[int]) -> str:
    return ", ".join(map(str, values))


def layer_note(model: nn.Module, layers: Sequence[HFAttentionLayer]) -> str | None:
    """The one-line note naming the blocks of ``model`` without heads, or None when every block
    holds one attention layer (or the layers are not one per block of one list)."""
    found = [_block_of(model, layer.path) for layer in layers]
    if not found or None in found or len({path for path, _ in found}) != 1:
        return None
    list_path = found[0][0]
    indices = [index for _, index in found]
    blocks = model.get_submodule(list_path)
    if len(set(indices)) != len(indices):
        return None
    without = [i for i in range(len(blocks)) if i not in set(indices)]
    if not without:
        return None
    kinds: dict[str, list[int]] = {}
    for i in without:
        kinds.setdefault(_kind(model, blocks, i), []).append(i)
    named = "; ".join(f"{_numbers(group)} ({kind})" for kind, group in kinds.items())
    one, alone = len(layers) == 1, len(without) == 1
    return (
        f"attention layer{'' if one else 's'} {_numbers(range(len(layers)))} "
        f"{'is' if one else 'are'} the model's block{'' if one else 's'} {_numbers(indices)} "
        f"(of {len(blocks)}, {list_path}); block{'' if alone else 's'} {named} "
        f"{'has' if alone else 'have'} no heads"
    )
