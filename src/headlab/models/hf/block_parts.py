"""The blocks of a transformers model, read from what transformers and the config declare.

The run protocol (``models/run_protocol.py``) needs each block of the model, its MLP and whether
the MLP reads the block's input (parallel). Nothing here is found by shape or by a class name's
suffix; each part is declared:

- the block: the ancestor of an attention module whose class is one of the model's
  ``_no_split_modules`` (transformers' own declaration of the modules that hold a whole layer:
  ``LlamaDecoderLayer``, ``GPT2Block``, ``GPTNeoXLayer``...);
- its MLP: the block's attribute among ``MLP_ATTRIBUTES``, the names transformers' blocks give
  their MLP (``mlp`` in every decoder so far, ``feed_forward`` in some hybrids);
- parallel: the config's own switch where the family has one (``use_parallel_residual``,
  ``parallel_attn``), else the families whose blocks are written parallel (``PARALLEL_FAMILIES``).

A model that does not declare these is refused in one line naming what is missing. Each block's
sites (``BLOCK_SITES``) are applied by four hooks put once on the block and its MLP; they read
the ``Sites`` kept on the block module, and do nothing while it is empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from headlab.attention.sites import BLOCK_SITES, Sites
from headlab.models.hf.layer import HFAttentionLayer
from headlab.models.run_protocol import Block

#: The attribute under which transformers' blocks hold their MLP.
MLP_ATTRIBUTES = ("mlp", "feed_forward", "block_sparse_moe")
#: Config fields that switch a family's blocks to parallel attention and MLP.
PARALLEL_FIELDS = ("use_parallel_residual", "parallel_attn")
#: Families whose blocks are parallel with no config switch (their modeling code).
PARALLEL_FAMILIES = frozenset({"gptj", "codegen", "phi", "cohere", "cohere2"})
#: The attribute of a block module that holds its ``HFBlockParts``.
ATTR = "headlab_block"


@dataclass(frozen=True, eq=False)
class HFBlockParts:
    """The modules of one block (``path`` in the model) and the sites its hooks apply."""

    path: str
    module: nn.Module
    mlp: nn.Module | None
    sites: Sites


def first_tensor(output: object) -> Tensor:
    """A module's output tensor (the first element where it returns a tuple)."""
    return output if isinstance(output, Tensor) else output[0]


def _replaced(output: object, value: Tensor) -> object:
    if isinstance(output, Tensor):
        return value
    return (value, *output[1:])


def _block_path(model: nn.Module, declared: set[str], attention_path: str) -> str | None:
    parts = attention_path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        path = ".".join(parts[:cut])
        if type(model.get_submodule(path)).__name__ in declared:
            return path
    return None


def _parallel(model: nn.Module) -> bool:
    config = model.config.get_text_config()
    for name in PARALLEL_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, bool):
            return value
    return getattr(config, "model_type", "") in PARALLEL_FAMILIES


def _input_hook(sites: Sites, site: str):
    """A forward pre-hook applying ``site`` to the module's first input (positional or the
    first keyword)."""

    def hook(_module, args, kwargs):
        if site not in sites.hooks:
            return None
        if args:
            return (sites(site, args[0]), *args[1:]), kwargs
        name = "hidden_states" if "hidden_states" in kwargs else next(iter(kwargs))
        return args, {**kwargs, name: sites(site, kwargs[name])}

    return hook


def _output_hook(sites: Sites, site: str):
    def hook(_module, _args, output):
        if site not in sites.hooks:
            return None
        return _replaced(output, sites(site, first_tensor(output)))

    return hook


def _parts(path: str, module: nn.Module) -> HFBlockParts:
    """The parts kept on ``module``, with the hooks put on it the first time (a variant's view of
    a block carries the original's hooks, which read the view's own parts: fresh sites)."""
    kept = module.__dict__.get(ATTR)
    if kept is not None and kept.module is module:
        return kept
    mlp = next((getattr(module, n) for n in MLP_ATTRIBUTES
                if isinstance(getattr(module, n, None), nn.Module)), None)  # fmt: skip
    parts = HFBlockParts(path, module, mlp, Sites(BLOCK_SITES))
    object.__setattr__(module, ATTR, parts)
    if kept is None:  # hooks read the parts kept on the module they run on
        module.register_forward_pre_hook(_dispatch_in("resid_in"), with_kwargs=True)
        module.register_forward_hook(_dispatch_out("resid_out"))
        if mlp is not None:
            mlp.register_forward_pre_hook(_dispatch_in("mlp_in", parent=module), with_kwargs=True)
            mlp.register_forward_hook(_dispatch_out("mlp_out", parent=module))
    return parts


def _sites_of(module: nn.Module, parent: nn.Module | None) -> Sites | None:
    parts = (parent if parent is not None else module).__dict__.get(ATTR)
    return None if parts is None else parts.sites


def _dispatch_in(site: str, parent: nn.Module | None = None):
    def hook(module, args, kwargs):
        sites = _sites_of(module, parent)
        return None if sites is None else _input_hook(sites, site)(module, args, kwargs)

    return hook


def _dispatch_out(site: str, parent: nn.Module | None = None):
    def hook(module, args, output):
        sites = _sites_of(module, parent)
        return None if sites is None else _output_hook(sites, site)(module, args, output)

    return hook


def hf_blocks(
    name: str, model: nn.Module, layers: list[HFAttentionLayer], causal: bool
) -> tuple[list[Block], list[HFBlockParts]]:
    """The protocol's blocks of ``model`` (one per attention layer) and their modules.
    ValueError (one line) where the model does not declare its blocks, two attention layers
    share one, a block has no attention (a hybrid) or no declared MLP attribute."""
    declared = set(getattr(model, "_no_split_modules", None) or ())
    if not declared:
        raise ValueError(f"{name} declares no block class (transformers' _no_split_modules): "
                         "its blocks cannot be read")  # fmt: skip
    paths = []
    for layer in layers:
        path = _block_path(model, declared, layer.path)
        if path is None:
            raise ValueError(f"{name}'s attention at {layer.path} is in none of its declared "
                             f"blocks ({', '.join(sorted(declared))})")  # fmt: skip
        paths.append(path)
    if len(set(paths)) != len(paths):
        raise ValueError(f"{name} has two attention layers in one block ({paths}): "
                         "cross-attention is not read by this route")  # fmt: skip
    container, _ = paths[0].rsplit(".", 1) if "." in paths[0] else ("", paths[0])
    listed = model.get_submodule(container) if container else model
    if isinstance(listed, nn.ModuleList) and len(listed) != len(paths):
        raise ValueError(f"{name} has {len(listed)} blocks in {container} but {len(paths)} with "
                         "attention (a hybrid): every block of a run needs its sites")  # fmt: skip
    parallel = _parallel(model)
    blocks, parts = [], []
    for i, (layer, path) in enumerate(zip(layers, paths, strict=True)):
        found = _parts(path, model.get_submodule(path))
        if found.mlp is None:
            kind, names = type(found.module).__name__, ", ".join(MLP_ATTRIBUTES)
            raise ValueError(f"{name}'s block {kind} has none of the MLP attributes "
                             f"transformers' blocks declare ({names})")  # fmt: skip
        stream = "decoder" if causal else "encoder"
        blocks.append(Block(i, stream, layer, found.sites, True, parallel))
        parts.append(found)
    return blocks, parts


__all__ = ["MLP_ATTRIBUTES", "PARALLEL_FAMILIES", "HFBlockParts", "first_tensor", "hf_blocks"]
