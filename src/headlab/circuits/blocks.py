"""Where a transformers-route model keeps its layers' parts, found by looking, not by family.

A circuit needs more of a model than its attention: the residual stream between layers and each
layer's MLP. ``blocks(model)`` finds them for a ``TransformersModel`` (every family of the
transformers route):

- a layer's block is the ancestor of its attention module that sits in a ``ModuleList`` (Llama's
  ``model.layers.3``, GPT-2's ``transformer.h.3``); the residual stream entering layer L is the
  first argument of block L, and every family returns the stream leaving it;
- its MLP is the block's child with the most parameters besides the attention (``mlp`` in every
  family so far, experts included);
- whether the MLP reads the attention's output (sequential) or the layer's input (parallel:
  GPT-NeoX, GPT-J) is observed: one short forward in which copy L of the batch changes only
  layer L's head outputs shows whether layer L's MLP input moves.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from headlab.attention.interventions import intervene
from headlab.circuits.graph import Graph, LayerShape
from headlab.models.hf.adapter import TransformersModel
from headlab.models.hf.layer import HFAttentionLayer


@dataclass(frozen=True)
class Block:
    """Layer ``index``: its block module (``path``), its attention, its MLP (None when the block
    has no other part with parameters), whether the MLP reads the layer's input (parallel)."""

    index: int
    path: str
    module: nn.Module
    attention: HFAttentionLayer
    mlp: nn.Module | None
    parallel: bool

    def shape(self) -> LayerShape:
        return LayerShape(
            self.attention.num_heads, self.attention.num_kv_heads, self.mlp is not None,
            self.parallel,
        )  # fmt: skip


def _block_path(model: nn.Module, attention_path: str) -> str:
    parts = attention_path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        parent = model.get_submodule(".".join(parts[: cut - 1])) if cut > 1 else model
        if isinstance(parent, nn.ModuleList):
            return ".".join(parts[:cut])
    raise ValueError(
        f"the attention module at {attention_path!r} sits in no ModuleList of layers; "
        "circuits need a model made of a list of layers"
    )


def _mlp(block: nn.Module, attention: nn.Module) -> nn.Module | None:
    best, most = None, 0
    for child in block.children():
        if child is attention or any(m is attention for m in child.modules()):
            continue
        count = sum(p.numel() for p in child.parameters())
        if count > most and any(p.dim() == 2 for p in child.parameters()):
            best, most = child, count
    return best


def first_tensor(output: object) -> Tensor:
    """A module's output tensor (the first element where it returns a tuple)."""
    return output if isinstance(output, Tensor) else output[0]


def blocks(model: TransformersModel) -> list[Block]:
    """Each layer's Block, in order. ValueError for an encoder, and where layers are not one
    attention per block in a ModuleList (hybrid layers without attention are not supported
    yet)."""
    if not model.causal:
        raise ValueError(
            f"{model.name} is not a decoder: circuits need the residual stream of a causal "
            "language model (an encoder's post-norm layers have none to split into edges)"
        )
    root = model.model
    found = []
    for i, layer in enumerate(model.layers):
        path = _block_path(root, layer.path)
        module = root.get_submodule(path)
        found.append((i, path, module, layer, _mlp(module, layer.module)))
    paths = [f[1] for f in found]
    if len(set(paths)) != len(paths):
        raise ValueError(f"two attention modules share one block ({paths}); not supported")
    parallel = _observe_parallel(model, [f[4] for f in found])
    return [Block(*f, parallel=p) for f, p in zip(found, parallel, strict=True)]


def _observe_parallel(model: TransformersModel, mlps: list[nn.Module | None]) -> list[bool]:
    """Copy L of a batch of L + 1 scales layer L's head outputs; layer L's MLP is parallel when
    its input in copy L equals the unchanged last copy's."""
    n = len(mlps)
    seen: dict[int, Tensor] = {}
    handles = []
    for i, mlp in enumerate(mlps):
        if mlp is not None:
            handles.append(mlp.register_forward_pre_hook(
                lambda _m, args, i=i: seen.__setitem__(i, args[0].detach())
            ))  # fmt: skip

    def scale(layer_index):
        def fn(t: Tensor) -> Tensor:  # (batch, head, q_pos, d_head)
            out = t.clone()
            out[layer_index] = 3.0 * t[layer_index] + 1.0
            return out

        return fn

    vocab = int(model.config.vocab_size)
    ids = (torch.arange(1, 4) % vocab)[None].repeat(n + 1, 1)
    device = next(model.model.parameters()).device
    try:
        with torch.no_grad(), ExitStack() as stack:
            for i, layer in enumerate(model.layers):
                stack.enter_context(intervene(layer, "head_outputs", scale(i)))
            model.model(input_ids=ids.to(device), attention_mask=torch.ones_like(ids).to(device))
    finally:
        for handle in handles:
            handle.remove()
    parallel = []
    for i in range(n):
        if i not in seen:
            parallel.append(False)
            continue
        x = seen[i]
        parallel.append(bool(torch.allclose(x[i], x[n], rtol=1e-5, atol=1e-6)))
    return parallel


def graph_of(model: TransformersModel) -> Graph:
    """The graph (graph.py) of a transformers-route model."""
    return Graph.of([b.shape() for b in blocks(model)])


__all__ = ["Block", "blocks", "first_tensor", "graph_of"]
