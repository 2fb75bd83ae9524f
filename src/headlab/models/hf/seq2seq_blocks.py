"""The blocks of a transformers encoder-decoder (T5, BART, Marian, Whisper), both streams, in run
order: the encoder's blocks, then the decoder's.

An encoder block holds one attention (its self-attention); a decoder block two: its causal
self-attention and its cross-attention, whose key and value inputs read the encoder's final
states (``Block.reads`` = "encoder"). The attention layers and their kinds are those
``EncoderDecoderModel`` found (``attention_kinds``); each block is the ancestor of its layers
whose class transformers declares a whole layer (``_no_split_modules``), and its MLP the family's
declared ends (``block_parts.MLP_ENDS``: fc1/fc2, T5's DenseReluDense). A model that does not
declare these is refused in one line naming what is missing.
"""

from __future__ import annotations

from torch import nn

from headlab.models.hf.block_parts import HFBlockParts, declared_block_paths, read_parts
from headlab.models.hf.layer import HFAttentionLayer
from headlab.models.run_protocol import Block


def seq2seq_blocks(
    name: str, model: nn.Module, layers: dict[str, list[HFAttentionLayer]]
) -> tuple[list[Block], list[HFBlockParts]]:
    """The protocol's blocks of ``model`` (encoder blocks, then decoder blocks with their
    cross-attention) and their modules, from ``layers`` by kind ("encoder", "decoder",
    "cross"). ValueError (one line) naming what is missing."""
    encoder = declared_block_paths(name, model, layers["encoder"], "encoder ")
    decoder = declared_block_paths(name, model, layers["decoder"], "decoder self-")
    cross = declared_block_paths(name, model, layers["cross"], "cross-")
    if cross != decoder:
        raise ValueError(
            f"{name}'s cross-attention layers are not one per decoder block "
            f"({len(cross)} cross, {len(decoder)} decoder blocks)"
        )
    family = str(getattr(model.config, "model_type", ""))
    blocks, parts = [], []
    rows = [(path, layer, None) for path, layer in zip(encoder, layers["encoder"], strict=True)]
    rows += [
        (path, layer, x)
        for path, layer, x in zip(decoder, layers["decoder"], layers["cross"], strict=True)
    ]
    for i, (path, layer, cross_layer) in enumerate(rows):
        found = read_parts(path, model.get_submodule(path), family, layer, cross_layer)
        if found.mlp_in is None:
            raise ValueError(
                f"{name}'s block {type(found.module).__name__} has no MLP this "
                f"route knows (its family {family!r} declares none)"
            )
        if layer.num_kv_heads != layer.num_heads:
            raise ValueError(f"{name}: grouped K/V heads in an encoder-decoder are not read")
        stream = "encoder" if cross_layer is None else "decoder"
        reads = None if cross_layer is None else "encoder"
        blocks.append(
            Block(i, stream, layer, found.sites, True, False, cross_layer, reads, found.norms)
        )
        parts.append(found)
    return blocks, parts


__all__ = ["seq2seq_blocks"]
