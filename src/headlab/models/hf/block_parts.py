"""The blocks of a transformers model, read from what transformers and the config declare.

The run protocol (``models/run_protocol.py``) needs each block of the model, its MLP and whether
the MLP reads the block's input (parallel). Nothing here is found by shape or by a class name's
suffix; each part is declared:

- the block: the ancestor of an attention module whose class is one of the model's
  ``_no_split_modules`` (transformers' own declaration of the modules that hold a whole layer:
  ``LlamaDecoderLayer``, ``GPT2Block``, ``GPTNeoXLayer``...), or for a model that names none
  (Marian), of the classes its stacks declare give their hidden states
  (``_can_record_outputs["hidden_states"]``);
- its MLP: the block's attribute among ``MLP_ATTRIBUTES``, the names transformers' blocks give
  their MLP (``mlp`` in every decoder so far, ``feed_forward`` in some hybrids), or, for the
  families whose MLP is two modules with the residual add between them (BERT's ``intermediate``
  and ``output``), the module whose input is the MLP's input and the one whose output is the
  MLP's output (``MLP_ENDS``, by the config's ``model_type``);
- parallel: the config's own switch where the family has one (``use_parallel_residual``,
  ``parallel_attn``), else the families whose blocks are written parallel (``PARALLEL_FAMILIES``).

A model that does not declare these is refused in one line naming what is missing. Each block's
sites (``BLOCK_SITES``) are applied by four hooks put once on the block and its MLP; they read
the ``Sites`` kept on the block module (the MLP: those of the block calling it, so that a
variant sharing the MLP module keeps its own), and do nothing while it is empty. The block's
norms outside its MLP, each with its "scale" site, are read in ``norm_sites.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor, nn

from headlab.attention.sites import BLOCK_SITES, Sites
from headlab.models.hf.layer import HFAttentionLayer
from headlab.models.hf.norm_sites import HFNorm, block_norms, running
from headlab.models.run_protocol import Block

#: The attribute under which transformers' blocks hold their MLP.
MLP_ATTRIBUTES = ("mlp", "feed_forward", "block_sparse_moe")
#: Families whose MLP is not one module: model_type -> (the module reading the MLP's input, the
#: module giving its output), paths inside the block.
MLP_ENDS = {name: ("intermediate", "output.dense") for name in ("bert", "roberta")}
#: The encoder-decoders: BART, Marian and Whisper write their MLP as fc1 and fc2 on the block;
#: T5 as the last sublayer's DenseReluDense (its index: 1 in an encoder block, 2 in a decoder's).
MLP_ENDS.update({name: ("fc1", "fc2") for name in ("bart", "marian", "whisper")})
MLP_ENDS["t5"] = ("layer.-1.DenseReluDense", "layer.-1.DenseReluDense")
#: Config fields that switch a family's blocks to parallel attention and MLP.
PARALLEL_FIELDS = ("use_parallel_residual", "parallel_attn")
#: Families whose blocks are parallel with no config switch (their modeling code).
PARALLEL_FAMILIES = frozenset({"gptj", "codegen", "phi", "cohere", "cohere2"})
#: The attribute of a block module that holds its ``HFBlockParts``.
ATTR = "headlab_block"
#: The attribute of a block or MLP module whose hooks are on it.
HOOKED = "headlab_block_hooked"
#: The attribute of an MLP module that holds the parts of the block now calling it.
RUNNING = "headlab_running_block"


@dataclass(frozen=True, eq=False)
class HFBlockParts:
    """The modules of one block (``path`` in the model): the modules whose input and output are
    the MLP's (one module in most families), the sites its hooks apply, and its norms outside
    the MLP."""

    path: str
    module: nn.Module
    mlp_in: nn.Module | None
    mlp_out: nn.Module | None
    sites: Sites
    norms: tuple[HFNorm, ...] = ()


def first_tensor(output: object) -> Tensor:
    """A module's output tensor (the first element where it returns a tuple)."""
    return output if isinstance(output, Tensor) else output[0]


def _replaced(output: object, value: Tensor) -> object:
    if isinstance(output, Tensor):
        return value
    return (value, *output[1:])


def block_path(model: nn.Module, declared: set[str], attention_path: str) -> str | None:
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


def _submodule(module: nn.Module, path: str) -> nn.Module:
    """``module.get_submodule(path)``, where a negative index counts from a list's end."""
    for name in path.split("."):
        module = module[int(name)] if name.startswith("-") else getattr(module, name)
    return module


def _mlp_ends(module: nn.Module, family: str) -> tuple[nn.Module | None, nn.Module | None]:
    if family in MLP_ENDS:
        first, last = MLP_ENDS[family]
        return _submodule(module, first), _submodule(module, last)
    mlp = next(
        (
            getattr(module, n)
            for n in MLP_ATTRIBUTES
            if isinstance(getattr(module, n, None), nn.Module)
        ),
        None,
    )
    return mlp, mlp


def read_parts(
    path: str,
    module: nn.Module,
    family: str,
    attention: HFAttentionLayer,
    cross: HFAttentionLayer | None = None,
) -> HFBlockParts:
    """The parts kept on ``module`` (fresh sites for a variant's view of a block, which carries
    the original's attributes and hooks), with the hooks put on the block and its MLP once;
    ``attention`` (and ``cross``, a decoder block's cross-attention) name the roles of its
    norms."""
    kept = module.__dict__.get(ATTR)
    if kept is not None and kept.module is module:
        return kept
    mlp_in, mlp_out = _mlp_ends(module, family)
    mlp = [m for m in (mlp_in, mlp_out) if m is not None]
    norms = block_norms(module, mlp, attention, cross)
    parts = HFBlockParts(path, module, mlp_in, mlp_out, Sites(BLOCK_SITES), norms)
    object.__setattr__(module, ATTR, parts)
    if not module.__dict__.get(HOOKED):
        object.__setattr__(module, HOOKED, True)
        module.register_forward_pre_hook(_block_in, with_kwargs=True)
        module.register_forward_hook(_block_out)
    if mlp_in is not None and not mlp_in.__dict__.get(HOOKED + "_in"):
        object.__setattr__(mlp_in, HOOKED + "_in", True)
        mlp_in.register_forward_pre_hook(_mlp_in, with_kwargs=True)
    if mlp_out is not None and not mlp_out.__dict__.get(HOOKED + "_out"):
        object.__setattr__(mlp_out, HOOKED + "_out", True)
        mlp_out.register_forward_hook(_mlp_out)
    return parts


def _own_parts(module: nn.Module) -> HFBlockParts | None:
    """The parts read for this very module (not those a view copied from its original)."""
    parts = module.__dict__.get(ATTR)
    return parts if parts is not None and parts.module is module else None


def _block_in(module, args, kwargs):
    parts = _own_parts(module)
    if parts is None:
        return None
    for mlp in (parts.mlp_in, parts.mlp_out):  # maybe shared with a variant: its caller's sites
        if mlp is not None:
            object.__setattr__(mlp, RUNNING, parts)
    running(parts.norms)
    return _input_hook(parts.sites, "resid_in")(module, args, kwargs)


def _block_out(module, args, output):
    parts = _own_parts(module)
    return None if parts is None else _output_hook(parts.sites, "resid_out")(module, args, output)


def _mlp_in(module, args, kwargs):
    parts = module.__dict__.get(RUNNING)
    return None if parts is None else _input_hook(parts.sites, "mlp_in")(module, args, kwargs)


def _mlp_out(module, args, output):
    parts = module.__dict__.get(RUNNING)
    return None if parts is None else _output_hook(parts.sites, "mlp_out")(module, args, output)


def declared_block_classes(model: nn.Module) -> set[str]:
    """The class names transformers declares a whole layer of ``model``: its
    ``_no_split_modules``, or where it names none (Marian), the classes its stacks record as
    giving their hidden states (``_can_record_outputs["hidden_states"]``, a class or an
    ``OutputRecorder`` of one)."""
    declared = set(getattr(model, "_no_split_modules", None) or ())
    if declared:
        return declared
    for module in model.modules():
        recorded = getattr(module, "_can_record_outputs", None)
        found = recorded.get("hidden_states") if isinstance(recorded, dict) else None
        found = getattr(found, "target_class", found)
        if isinstance(found, type):
            declared.add(found.__name__)
    return declared


def declared_block_paths(
    name: str, model: nn.Module, layers: list[HFAttentionLayer], kind: str = "", shared: str = ""
) -> list[str]:
    """Each attention layer's block path, its block one of the model's declared block classes
    (``declared_block_classes``). ValueError (one line) where the model declares none, a
    layer is in none, or two share one (``kind`` names the layers: "cross-"; ``shared`` ends that
    message)."""
    declared = declared_block_classes(model)
    if not declared:
        raise ValueError(
            f"{name} declares no block class (transformers' _no_split_modules, or the layer "
            "class whose outputs are its hidden_states): its blocks cannot be read"
        )
    paths = []
    for layer in layers:
        path = block_path(model, declared, layer.path)
        if path is None:
            raise ValueError(
                f"{name}'s {kind}attention at {layer.path} is in none of its declared "
                f"blocks ({', '.join(sorted(declared))})"
            )
        paths.append(path)
    if len(set(paths)) != len(paths):
        raise ValueError(f"{name} has two {kind}attention layers in one block ({paths}){shared}")
    return paths


def hf_blocks(
    name: str,
    model: nn.Module,
    layers: list[HFAttentionLayer],
    causal: bool,
    stream: str | None = None,
) -> tuple[list[Block], list[HFBlockParts]]:
    """The protocol's blocks of ``model`` (one per attention layer) and their modules, of the
    stream ``stream`` (default: "decoder" or, not ``causal``, "encoder").
    ValueError (one line) where the model does not declare its blocks, two attention layers
    share one, a block has no attention (a hybrid) or no declared MLP attribute."""
    paths = declared_block_paths(
        name, model, layers, shared=": cross-attention is not read by this route"
    )
    container, _ = paths[0].rsplit(".", 1) if "." in paths[0] else ("", paths[0])
    listed = model.get_submodule(container) if container else model
    if isinstance(listed, nn.ModuleList) and len(listed) != len(paths):
        raise ValueError(
            f"{name} has {len(listed)} blocks in {container} but {len(paths)} with "
            "attention (a hybrid): every block of a run needs its sites"
        )
    parallel = _parallel(model)
    stream = stream or ("decoder" if causal else "encoder")
    family = str(getattr(model.config.get_text_config(), "model_type", ""))
    blocks, parts = [], []
    for i, (layer, path) in enumerate(zip(layers, paths, strict=True)):
        found = read_parts(path, model.get_submodule(path), family, layer)
        if found.mlp_in is None:
            kind, names = type(found.module).__name__, ", ".join(MLP_ATTRIBUTES)
            raise ValueError(
                f"{name}'s block {kind} has none of the MLP attributes "
                f"transformers' blocks declare ({names})"
            )
        blocks.append(Block(i, stream, layer, found.sites, True, parallel, norms=found.norms))
        parts.append(found)
    return blocks, parts


__all__ = [
    "MLP_ATTRIBUTES",
    "PARALLEL_FAMILIES",
    "HFBlockParts",
    "block_path",
    "first_tensor",
    "hf_blocks",
    "read_parts",
]
