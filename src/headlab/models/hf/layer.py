"""One transformers attention module as headlab sees it: ``HFAttentionLayer``, kept on the module.

Every attention module of a model on headlab's attention carries one ``HFAttentionLayer`` as its
attribute ``ATTR`` (never in a global table: two models in one process, or a model and its
variants, each read their own). The registered function (attention.py) reads it in every call
and hands the kernel what it holds:

    sites       interventions, statistics requests, a KeyBudget (``attention.sites.Sites``)
    head_mask   this forward's head mask ((head,) or (batch, head)), set by the adapter's ``run``
                for one forward, None otherwise (Michel et al.'s xi, with autograd)
    view        the head view (the same weights viewed with fewer heads), or None

Sizes come from the call itself (probe.py): ``num_heads``, ``num_kv_heads`` and ``head_dim`` are
the shapes transformers passes (Qwen3's head_dim 10 != 48 / 6, GPT-NeoX's head_size), and
``embed_dim`` the width of the output projection's output. ``output`` is the module that consumes
the function's output (the output projection W_O, wherever the family keeps it: ``o_proj``,
GPT-2's ``c_proj``, BERT's ``BertSelfOutput.dense`` in the parent), found by observing one call;
``input_norm`` the pre-norm whose output the projections read (its scale: ``input_scale``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.utils.weak import WeakTensorKeyDictionary

from headlab.attention import layout
from headlab.attention.sites import Sites
from headlab.attention.streaming_sums import StatisticsRequest

#: A stored-transposed W_O (GPT-2's Conv1D) -> (what it was when copied, its (out, in) copy): the
#: copy is made once per weight, so that every later call returns the same tensor and what is
#: kept per W_O (the contribution norms' factors, output_norms.py) is found again.
_CONTIGUOUS = WeakTensorKeyDictionary()

#: The attribute of an attention module that holds its HFAttentionLayer.
ATTR = "headlab_layer"
#: The attribute of a model (the root module) that holds its layers, in order.
MODEL_ATTR = "headlab_layers"


@dataclass(frozen=True)
class Projection:
    """Rows of a module's weight that make one input: ``rows`` of ``module``'s weight viewed as
    (out, in) (``transposed``: the module stores (in, out), as GPT-2's Conv1D), at ``path`` in the
    model."""

    path: str
    module: nn.Module
    transposed: bool
    rows: tuple[int, ...]

    def weight(self) -> Tensor:
        """The module's weight as (out, in)."""
        weight = self.module.weight
        return weight.t() if self.transposed else weight

    def selected(self) -> Tensor:
        """(len(rows), in): the rows that make this input; a view of the parameter where they
        are consecutive (separate and [q; k; v]-fused projections), a copy otherwise."""
        rows = self.rows
        if rows == tuple(range(rows[0], rows[0] + len(rows))):
            return self.weight()[rows[0] : rows[0] + len(rows)]
        return self.weight()[list(rows)]


@dataclass(frozen=True)
class Norm:
    """The norm in front of a layer (a module with a 1-D weight) at ``path`` in the model."""

    path: str
    module: nn.Module


def norm_scale(module: nn.Module, width: int) -> Tensor:
    """(width,) the scale g of a norm computing n(x) * g + b, with n(x) = x / rms(x) for inputs
    of mean zero (RMSNorm, LayerNorm, Gemma's 1 + weight alike), read from the module's own
    output on a mean-zero input v and on -v: g = (f(v) - f(-v)) / (2 n(v)). ValueError where the
    module is not such a map (checked on a second input)."""
    signs = torch.tensor([1.0, -1.0]).repeat(width // 2 + 1)[:width]
    if width % 2:  # odd width: 2, -1, -1 first, then +-1 pairs: still mean zero, no zero entry
        signs[:3] = torch.tensor([2.0, -1.0, -1.0])
    weight = module.weight
    v = (signs * 1e3).to(weight.dtype)  # large: the norm's eps is negligible
    n = v / v.pow(2).mean().sqrt()
    with torch.no_grad():
        plus, minus = module(v[None, None])[0, 0], module(-v[None, None])[0, 0]
        scale, shift = (plus - minus) / (2 * n), (plus + minus) / 2
        u = torch.roll(v, 1) * torch.linspace(0.5, 1.5, width, dtype=v.dtype)
        u = u - u.mean()
        check = module(u[None, None])[0, 0]
    want = u / u.pow(2).mean().sqrt() * scale + shift
    gap = float((check - want).abs().max())
    tolerance = 1e-3 if weight.dtype in (torch.float32, torch.float64) else 3e-2
    if gap > tolerance * max(float(check.abs().max()), 1e-6):
        raise ValueError(
            f"the norm before the layer ({type(module).__name__}) is not a scaled "
            f"normalisation n(x) * g + b (off by {gap:.3g}), so its scale cannot be folded"
        )
    return scale.detach()


@dataclass
class HFAttentionLayer:
    """The headlab side of one transformers attention module (see the module docstring).

    module: the attention module; path: where it is in the model; family: the config's model_type.
    num_heads, num_kv_heads, head_dim: the heads as the view shows them (the module's own without
    a view); embed_dim: the layer's input and output width. output: the output projection (its
    ``rows`` are every column of W_O), or None when no module consumes the function's output
    unchanged. query, key: where W_Q and W_K are, or the reason they cannot be had.
    copied_parameters: parameters that are copies of K/V rows (removing heads from uneven
    groups), counted once by the model's parameter count.
    """

    module: nn.Module
    path: str
    family: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    embed_dim: int
    output: Projection | None = None
    query: Projection | str = "not observed"
    key: Projection | str = "not observed"
    value: Projection | str = "not observed"
    input_norm: Norm | None = None
    view: int | None = None
    copied_parameters: int = 0
    sites: Sites = field(default_factory=Sites)
    head_mask: Tensor | None = None

    # ------------------------------------------------------------------ the interface
    def query_key_weights(self) -> tuple[Tensor, Tensor]:
        """(W_Q (num_heads * head_dim, embed_dim), W_K (num_kv_heads * head_dim, embed_dim)):
        the rows of the projections that make the queries and keys, before rotary positions.
        ValueError where the queries or keys are not a linear map of the layer's input."""
        if self.view is not None:
            raise ValueError("a view of merged heads has no W_Q and W_K of its own")
        for name, found in (("queries", self.query), ("keys", self.key)):
            if isinstance(found, str):
                raise ValueError(
                    f"{self.family} ({type(self.module).__name__} at {self.path}): the {name} are "
                    f"not a linear map of the layer's input ({found}), so there is no W_Q/W_K"
                )
        return self.query.selected(), self.key.selected()

    def value_output_weights(self) -> tuple[Tensor, Tensor]:
        """(W_V (num_kv_heads * head_dim, embed_dim), W_O (embed_dim, num_heads * head_dim)):
        the rows of the projection that make the values and the output projection. ValueError
        where the values are not a linear map of the layer's input or no module takes the
        heads' output unchanged."""
        if self.view is not None:
            raise ValueError("a view of merged heads has no W_V and W_O of its own")
        where = f"{self.family} ({type(self.module).__name__} at {self.path})"
        if isinstance(self.value, str):
            raise ValueError(
                f"{where}: the values are not a linear map of the layer's input ({self.value}), "
                "so there is no W_V"
            )
        if self.output is None:
            raise ValueError(f"{where}: no module takes the heads' output unchanged: no W_O")
        return self.value.selected(), self.output_weight()

    def input_scale(self) -> Tensor | None:
        """(embed_dim,) the scale g of the norm in front of the layer (n(x) * g + b, read from
        the norm's own output: ``norm_scale``), None where the projections read the residual
        stream without one (or a post-norm's output: BERT). ValueError for a norm of another
        form."""
        if self.input_norm is None:
            return None
        return norm_scale(self.input_norm.module, self.embed_dim)

    # ------------------------------------------------------------------ what the function reads
    def head_scale(self, batch: int, heads: int, dtype: torch.dtype) -> Tensor | None:
        """This forward's head mask as the kernel's (batch|1, heads, 1, 1) scale of the module's
        own ``heads`` (a view's entries repeated over the heads of each group)."""
        mask = self.head_mask
        if mask is None:
            return None
        shown = self.num_heads
        mask = layout.head_scale(mask, batch, shown)  # (batch|1, shown, 1, 1)
        if shown != heads:
            mask = mask.repeat_interleave(heads // shown, dim=1)
        return mask.to(dtype)

    def output_weight(self) -> Tensor | None:
        """W_O as (embed_dim, head * d_head), or None when no output projection was found."""
        if self.output is None:
            return None
        weight = self.output.weight()
        return _contiguous(weight) if self.output.transposed else weight

    def statistics_request(self) -> StatisticsRequest | None:
        """The sites' statistics request with this layer's W_O (contribution norms); without one
        (no module takes the function's output unchanged: a gate multiplies it first) the sums
        hold no contribution norms at all (``attention.streaming_sums``)."""
        request = self.sites.statistics
        if request is None:
            return None
        return dataclasses.replace(request, output_weight=self.output_weight())


def _contiguous(weight: Tensor) -> Tensor:
    """``weight`` (a transposed view of a parameter) as a contiguous tensor: where no gradient
    is asked for, the one copy kept for that parameter while it is unchanged (the same data,
    version, dtype and device), else a fresh copy on the autograd graph."""
    if torch.is_grad_enabled() and weight.requires_grad:
        return weight.contiguous()
    source = weight._base if weight._base is not None else weight
    try:
        state = (source._version, source.data_ptr(), source.dtype, source.device)
    except RuntimeError:  # an inference tensor keeps no version: copy it every call
        return weight.contiguous()
    kept = _CONTIGUOUS.get(source)
    if kept is None or kept[0] != state:
        with torch.inference_mode(False), torch.no_grad():
            kept = (state, weight.detach().contiguous())
        _CONTIGUOUS[source] = kept
    return kept[1]


def layer_of(module: nn.Module) -> HFAttentionLayer | None:
    """The HFAttentionLayer kept on ``module``, or None."""
    return module.__dict__.get(ATTR)


def keep(module: nn.Module, layer: HFAttentionLayer) -> HFAttentionLayer:
    """Put ``layer`` on ``module`` (a plain attribute: not a parameter, not a submodule)."""
    object.__setattr__(module, ATTR, layer)
    return layer


def model_layers(model: nn.Module) -> list[HFAttentionLayer] | None:
    """The layers kept on ``model`` (the root module), or None."""
    return model.__dict__.get(MODEL_ATTR)


def keep_all(model: nn.Module, layers: list[HFAttentionLayer]) -> list[HFAttentionLayer]:
    """Put each layer on its module and the list on ``model``."""
    for layer in layers:
        keep(layer.module, layer)
    object.__setattr__(model, MODEL_ATTR, layers)
    return layers


def rebuilt(
    layer: HFAttentionLayer, root: nn.Module, module: nn.Module, rows=None, **changes
) -> HFAttentionLayer:
    """``layer`` for ``module`` in the model ``root`` (a variant): its projections looked up
    again by path (with new ``rows``, name -> rows, for "output", "query", "key", "value"), fresh
    sites (interventions belong to the module they were set on), the ``changes`` applied."""
    rows = rows or {}

    def again(found, name):
        if isinstance(found, str):
            return found
        return Projection(
            found.path, root.get_submodule(found.path), found.transposed, rows.get(name, found.rows)
        )

    fields = {"module": module, "sites": Sites(), "head_mask": None, **changes}
    for name in ("output", "query", "key", "value"):
        if name not in changes:
            found = getattr(layer, name)
            fields[name] = None if found is None else again(found, name)
    norm = layer.input_norm
    if norm is not None and "input_norm" not in changes:
        fields["input_norm"] = Norm(norm.path, root.get_submodule(norm.path))
    return dataclasses.replace(layer, **fields)
