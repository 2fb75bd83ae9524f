"""What is attached to one attention layer and applied in every call of it: ``Sites``.

An attention layer (headlab's ``MultiHeadAttention``, or a transformers attention module behind
headlab's registered attention function) owns one ``Sites``. The kernel
(``headlab.attention.kernel.attend``) reads it in every call:

- ``hooks``: interventions, site name -> functions that see (and may replace) the tensor there;
  the public sites are ``SITES`` (see ``headlab.attention.interventions``), in the order a call
  reaches them. A model's block (``headlab.models.run_protocol.Block``) owns a ``Sites`` of
  its own over ``BLOCK_SITES``, so that one ``intervene`` reaches the residual stream and the
  MLP as it reaches the attention. ``logits`` (the scaled scores before soft-cap and mask) is
  an inner site for variants built on the kernel (talking heads mixes its heads there).
- ``statistics``: a request to stream per-head statistics (``headlab.attention.streaming_sums``);
  the sums of each call go to the request's ``report``.
- ``budget``: a key budget (``KeyBudget``): some query heads see only the first ``sinks`` keys
  and the last ``window`` ones, as a KV cache that keeps only those would let them.

An empty ``Sites`` is falsy, and the kernel then takes its fastest path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

#: The public intervention sites, in the order a call reaches them.
SITES = ("q", "k", "v", "scores", "weights", "head_outputs")
#: The sites of a model's block, in the order a run reaches them: the residual stream entering
#: the block, the MLP's input and output, the residual stream leaving the block.
BLOCK_SITES = ("resid_in", "mlp_in", "mlp_out", "resid_out")
#: The site of a norm of a model's block: one over each row's scale, 1/s (..., 1), of a norm
#: n(x) = g * C(x) / s(x) + b (C: the centring of a LayerNorm, or none); a replaced 1/s makes
#: the norm compute g * C(x) * (1/s) + b with it (held scales: the norm becomes affine in x).
NORM_SITES = ("scale",)
#: Sites the fused kernel (SDPA) can serve: they are outside the score matrix.
OUTSIDE_SCORES = frozenset({"q", "k", "v", "head_outputs"})

Hook = Callable[[Tensor], Tensor | None]


@dataclass(frozen=True)
class KeyBudget:
    """Query heads ``heads`` ((head,) bool) see only keys 0 .. sinks - 1 and the ``window`` keys
    up to their own position (``MaskSpec``'s sliding window with sink keys)."""

    sinks: int
    window: int
    heads: Tensor


class Sites:
    """Interventions (``hooks``) and a statistics request attached to one attention layer, or
    (``names`` = ``BLOCK_SITES``) the interventions of one block."""

    def __init__(self, names: tuple[str, ...] = SITES) -> None:
        self.names = names
        self.hooks: dict[str, list[Hook]] = {}
        # a ``streaming_sums.StatisticsRequest`` (not imported: streaming_sums imports the
        # kernel's math, which imports this module)
        self.statistics: object | None = None
        self.budget: KeyBudget | None = None

    def __bool__(self) -> bool:
        return bool(self.hooks) or self.statistics is not None or self.budget is not None

    def __call__(self, site: str, x: Tensor) -> Tensor:
        """``x`` after every hook at ``site`` (a hook returning None leaves it)."""
        for hook in self.hooks.get(site, ()):
            replaced = hook(x)
            if replaced is not None:
                x = replaced
        return x

    def touches_scores(self) -> bool:
        """Whether a hook needs the score or weight matrix (SDPA cannot serve it)."""
        return any(site not in OUTSIDE_SCORES for site in self.hooks)

    def add(self, site: str, hook: Hook, first: bool = False) -> None:
        """``hook`` after the hooks at ``site`` already there (``first``: before them)."""
        hooks = self.hooks.setdefault(site, [])
        hooks.insert(0, hook) if first else hooks.append(hook)

    def remove(self, site: str, hook: Hook) -> None:
        hooks = self.hooks[site]
        hooks.remove(hook)
        if not hooks:
            del self.hooks[site]
