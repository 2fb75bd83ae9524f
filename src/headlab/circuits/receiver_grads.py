"""The metric's gradient at an attention receiver's input (dm/dx_v, v a query head or a K/V
group's keys or values), a block of positions at a time, for edge attribution (attribution.py).

x is the residual stream entering the layer at the block's positions; v reads it through the
norm in front of the layer, its projection and what the family does after it (reshape, rotary,
QK-norm), which act on each position alone.

Generic (``site_input_grads``): that map run forward on the rows, then one backward per
receiver, batched, each from the metric's gradient at its own slice of its site (q, k or v).
Each backward goes through the whole projection and the norm: for R receivers R times the
projection's work, where one receiver's slice is all it needs (SmolLM2: 15 receivers per layer,
each through the (1600 x 960) projections).

Sliced (``SlicedReceivers``): where the map from a projection's output y to the sites keeps
each head on its own columns of y (reshape, rotary, per-head QK-norm), the gradient run's one
backward already holds at y every receiver's gradient on its own columns (the receivers' sums
do not mix), and the rest is linear algebra on d_head-wide slices, no backward:

    dm/dn_v = dm/dy[..., cols_v] @ W[cols_v, :]              (d_head, embed_dim) rows of W
    dm/dx_v = (1/s) (I - [1 1^T / d] - x^ x^T / d) (g * dm/dn_v)

for the norm in front n = g * (x - [mean x]) / s + b (x^ = (x - [mean x]) / s, d = embed_dim;
the bracketed terms for LayerNorm, none for RMSNorm); 1/s is read from the norm's own output at
each position, so its epsilon needs no knowing. Whether a layer may take it (and which norm it
has) is observed once per layer, on ``CHECK_ROWS`` positions of a random stream with random
gradients at the sites (every map here acts on each position alone), against the generic path
with the receivers weighted by random coefficients (one backward; ``sliced_receivers``), as
``Patcher.writes_are_linear`` observes the writes; where it does not agree (QK-norm over
all heads at once, a norm of another form, a head view), the layer takes the generic path.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from headlab.circuits.resume import Runner
from headlab.models.run_protocol import kept_outputs

#: (site, index): a query head's "q", or a K/V group's (a head's own) "k" or "v".
Receiver = tuple[str, int]
#: Positions on which a layer's sliced gradients are compared with the generic ones.
CHECK_ROWS = 16
#: Largest difference (a share of the largest gradient) for the sliced path to count as equal.
CHECK_TOLERANCE = 1e-4


def site_input_grads(
    runner: Runner,
    layer: int,
    x: Tensor,
    rows: slice,
    site_grads: dict[str, Tensor],
    receivers: list[Receiver],
) -> Tensor:
    """(receiver, batch, rows, embed_dim) the generic path: x (batch, rows, embed_dim) the
    stream at the positions ``rows``; site_grads: "q", "k", "v" -> (batch, head, rows, d_head)
    the metric's gradient at the sites at those positions."""
    x = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        seen = runner.values(layer, x, 1, rows=rows)
        sites = sorted({site for site, _ in receivers})
        upstream = {s: seen[s].new_zeros(len(receivers), *seen[s].shape) for s in sites}
        for c, (site, i) in enumerate(receivers):  # (receiver, batch, head, rows, d_head)
            upstream[site][c, :, i] = site_grads[site][:, i]
        (gx,) = torch.autograd.grad(
            [seen[s] for s in sites], x, [upstream[s] for s in sites], is_grads_batched=True
        )
    return gx


@dataclass(frozen=True)
class SlicedReceivers:
    """The sliced path for ``receivers`` of one layer (see the module docstring).

    modules: the distinct projection modules the receivers read (one where the family fuses
    q, k, v); module_of[r], columns[r] (d_head,): receiver r's module and its columns of that
    module's output; weights (receiver, d_head, embed_dim): W[cols_v, :] * g; column_sums
    (receiver, d_head): those rows summed over embed_dim; norm: the norm module in front, with
    its scale g and shift b (embed_dim,); centred: it subtracts the mean (LayerNorm)."""

    receivers: list[Receiver]
    modules: list[nn.Module]
    module_of: list[int]
    columns: list[Tensor]
    weights: Tensor
    column_sums: Tensor
    norm: nn.Module
    scale: Tensor
    shift: Tensor
    centred: bool = False

    def grads(self, x: Tensor, output_grads: list[Tensor]) -> Tensor:
        """(receiver, batch, rows, embed_dim): dm/dx_v for each receiver. x (batch, rows,
        embed_dim) the stream; output_grads: per module (batch, rows, out) the metric's
        gradient at its output at those positions."""
        b, rows, width = x.shape
        count, d_head = self.weights.shape[:2]
        with torch.no_grad():
            n = self.norm(x)
            centred = x - x.mean(-1, keepdim=True) if self.centred else x
            scaled = centred * self.scale
            tiny = torch.finfo(x.dtype).tiny
            inv_s = ((n - self.shift) * scaled).sum(-1, keepdim=True) / (
                scaled.pow(2).sum(-1, keepdim=True).clamp_min(tiny)
            )  # (batch, rows, 1): 1/s, read from the norm's output
            x_hat = (centred * inv_s).reshape(b * rows, width)
            y = torch.stack(
                [
                    output_grads[m].index_select(-1, cols) * inv_s
                    for m, cols in zip(self.module_of, self.columns, strict=True)
                ]
            ).reshape(count, b * rows, d_head)
            out = torch.bmm(y, self.weights)  # (receiver, batch * rows, embed_dim)
            along = x_hat @ self.weights.reshape(count * d_head, width).t()
            along = along.reshape(b * rows, count, d_head).transpose(0, 1)
            radial = (along * y).sum(-1, keepdim=True) / width  # (receiver, b * rows, 1)
            out.addcmul_(radial, x_hat.unsqueeze(0), value=-1.0)
            if self.centred:
                out -= (y * self.column_sums.unsqueeze(1)).sum(-1, keepdim=True) / width
        return out.reshape(count, b, rows, width)


def _plan(runner: Runner, layer: int, receivers: list[Receiver]) -> SlicedReceivers | None:
    """The sliced path's weights for ``receivers`` of ``layer``, None where the layer lacks a
    part it needs (a linear projection per input, a scaled norm in front, no head view)."""
    attention = runner.blocks[layer].attention
    if getattr(attention, "input_norm", None) is None or attention.view is not None:
        return None  # a layer of the transformers route only (its projections and norm)
    projections = {"q": attention.query, "k": attention.key, "v": attention.value}
    if any(isinstance(projections[site], str) for site, _ in receivers):
        return None
    try:
        scale = attention.input_scale()
    except ValueError:
        return None
    norm = attention.input_norm.module
    d = attention.head_dim
    modules: list[nn.Module] = []
    module_of, columns, rows = [], [], []
    for site, i in receivers:
        projection = projections[site]
        if not any(m is projection.module for m in modules):
            modules.append(projection.module)
        module_of.append(next(j for j, m in enumerate(modules) if m is projection.module))
        cols = list(projection.rows[i * d : (i + 1) * d])
        columns.append(torch.tensor(cols, device=scale.device))
        rows.append(projection.weight().detach()[cols])
    weights = torch.stack(rows) * scale  # (receiver, d_head, embed_dim)
    with torch.no_grad():
        shift = norm(
            torch.zeros(1, 1, weights.shape[-1], dtype=weights.dtype, device=weights.device)
        )[0, 0]
    return SlicedReceivers(
        receivers,
        modules,
        module_of,
        columns,
        weights.contiguous(),
        weights.sum(-1),
        norm,
        scale.to(weights.dtype),
        shift,
    )


def output_grads_at(
    runner: Runner,
    layer: int,
    x: Tensor,
    rows: slice,
    modules: list[nn.Module],
    site_grads: dict[str, Tensor],
) -> list[Tensor]:
    """Per module, (batch, rows, out) the gradient at its output of sum over sites of
    site . site_grads (one backward from the sites)."""
    kept: dict[int, Tensor] = {}

    def hooks(stack: ExitStack) -> None:
        stack.enter_context(kept_outputs(modules, kept, range(len(modules))))

    with torch.enable_grad():
        seen = runner.values(layer, x.detach().clone().requires_grad_(True), 1, hooks, rows)
        outputs = [kept[j] for j in range(len(modules))]
        sites = sorted(site_grads)
        return list(
            torch.autograd.grad(
                [seen[s] for s in sites], outputs, [site_grads[s] for s in sites], allow_unused=True
            )
        )


def sliced_receivers(
    runner: Runner, layer: int, receivers: list[Receiver]
) -> SlicedReceivers | None:
    """The sliced path for ``receivers`` of ``layer`` where it gives the generic path's
    gradients, else None. Observed on ``CHECK_ROWS`` positions of a random stream: random
    gradients g_r at each receiver's slice of its site give the projections' output gradients
    (one backward) that the sliced path reads; random coefficients c_r weight the receivers,
    and sum_r c_r (sliced dm/dx_r) must equal the generic path's sum_r c_r dm/dx_r, the one
    backward of sum_r c_r <site_r, g_r> (with the coefficients a receiver that reads another's
    rows shows, where a plain sum over the receivers would hide it)."""
    plan = _plan(runner, layer, receivers)
    if plan is None:
        return None
    rows = slice(0, min(CHECK_ROWS, runner.ids.shape[1]))
    generator = torch.Generator().manual_seed(0)
    width = plan.weights.shape[-1]
    x = torch.randn(runner.batch, rows.stop, width, generator=generator, dtype=torch.float64)
    x = x.to(plan.weights).requires_grad_(True)
    kept: dict[int, Tensor] = {}

    def hooks(stack: ExitStack) -> None:
        stack.enter_context(kept_outputs(plan.modules, kept, range(len(plan.modules))))

    coefficients = torch.randn(len(receivers), generator=generator, dtype=torch.float64)
    with torch.enable_grad():
        seen = runner.values(layer, x, 1, hooks, rows)
        sites = sorted({site for site, _ in receivers})
        upstream = {s: torch.zeros_like(seen[s]) for s in sites}  # (batch, head, rows, d_head)
        weighted = {s: torch.zeros_like(seen[s]) for s in sites}
        for (site, i), c in zip(receivers, coefficients.tolist(), strict=True):
            shape = upstream[site][:, i].shape
            g = torch.randn(shape, generator=generator, dtype=torch.float64).to(x)
            upstream[site][:, i] += g
            weighted[site][:, i] += c * g
        outputs = [kept[j] for j in range(len(plan.modules))]
        tensors = [seen[s] for s in sites]
        found = torch.autograd.grad(
            tensors, outputs, [upstream[s] for s in sites], retain_graph=True, allow_unused=True
        )
        (want,) = torch.autograd.grad(tensors, x, [weighted[s] for s in sites])
    if any(g is None for g in found):
        return None
    bound = CHECK_TOLERANCE * float(want.abs().max())
    weights = coefficients.to(want)
    for centred in (False, True):
        candidate = replace(plan, centred=centred)
        combined = torch.einsum("r,rbpe->bpe", weights, candidate.grads(x.detach(), list(found)))
        if float((combined - want).abs().max()) <= bound:
            return candidate
    return None


__all__ = [
    "CHECK_ROWS",
    "CHECK_TOLERANCE",
    "Receiver",
    "SlicedReceivers",
    "output_grads_at",
    "site_input_grads",
    "sliced_receivers",
]
