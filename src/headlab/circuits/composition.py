"""Weight-based composition between heads (Elhage et al. 2021, "A Mathematical Framework").

A sender head s (an earlier layer) writes OV_s x into the residual stream, OV_s = W_O^s W_V^s
(embed x embed, x the sender's input). A receiver head r reads it through W_QK^r = W_Q^r^T W_K^r
(score = x_q^T W_QK x_k) or OV_r. With ||.|| the Frobenius norm:

    Q-composition  ||W_QK^r^T OV_s|| / (||W_QK^r|| ||OV_s||)   (s feeds r's queries)
    K-composition  ||W_QK^r   OV_s|| / (||W_QK^r|| ||OV_s||)   (s feeds r's keys)
    V-composition  ||OV_r     OV_s|| / (||OV_r||   ||OV_s||)   (s feeds r's values)

GQA: a query head's W_K and W_V are those of its K/V group, shared by the group's query heads
(TransformerLens' fix, PR #1593, expands them the same way). The key and value inputs belong to
the group, so K- and V-composition are also given with the group as the receiver: its reading
matrix is the group's W_K (W_V) followed by every query head of the group, stacked
([W_QK^h]_h, [OV_h]_h), so its score is sqrt(sum_h num_h^2) / (||OV_s|| sqrt(sum_h ||W_h||^2)).

Folding: the scale g of the norm in front of each layer (RMSNorm / LayerNorm weight, Gemma's
1 + weight; ``AttentionLayer.input_scale``) is folded into that layer's W_Q, W_K and W_V
(W diag(g)). Not folded: the normalisation itself (division by the RMS or standard deviation,
mean subtraction: not linear), norm biases and projection biases (constant offsets), QK-norm
(no W_Q/W_K exists behind it: Q- and K-composition are left out for those layers, said in
``missing``), norms after the output projection (Gemma 2, OLMo 2) and the MLPs between layers.

Rotary: by default not applied. W_QK without positions is the bilinear form at relative offset
0 (a query and a key at the same position, where the rotation cancels); at other offsets rotary
rotates each pair of W_QK's dimensions, which that score does not see. The result says so
(``ROTARY``). With ``offsets`` (rotary-aware composition), the receiver's W_QK is the one at
relative offset delta (the key delta positions before the query, ``rotary_offsets.py``):
W_QK(delta) = (R(delta) W_Q)^T (R(0) W_K), the family's own rotation; Q- and K-composition use it
(V-composition has no positions). Over several offsets the reading matrix is the stack of
[W_QK(delta)]_delta (as a K/V group stacks its heads), so the score is
sqrt(sum_delta num_delta^2) / (||OV_s|| sqrt(sum_delta ||W_QK(delta)||^2)): a root-mean-square
over the offsets weighted by each offset's norm; one offset gives that offset's score.

Baseline: the expected score of random matrices of the same shapes (Gaussian factors, drawn
seeded: ``random_baseline``), about 1 / sqrt(embed) (for Gaussian factors
E||prod||^2 / (E||OV||^2 E||W||^2) = 1 / embed exactly).

The norms are computed on d_head x d_head Gram matrices, never on embed x embed products:
||P^T S W_O W_V|| ^2 = tr(M^T (P P^T) M (W_V W_V^T)), M = S W_O (d_head x d_head).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.circuits.rotary_offsets import rotations
from headlab.limits import check_int
from headlab.models.interface import HeadModel
from headlab.results.composition_result import Baseline, CompositionScores

MODES = ("q", "k", "v")
GROUP_MODES = ("k_group", "v_group")
ROTARY = (
    "not applied: W_QK without positions, the score at relative offset 0 "
    "(composition without rotary)"
)


@dataclass(frozen=True)
class LayerWeights:
    """One layer's per-head matrices, float64, the input norm's scale folded in.

    w_q: (head, d_head, embed) or None; w_k, w_v: (kv_head, d_head, embed) (w_k None with w_q);
    w_o: (head, embed, d_head) (None with w_v where the layer has no W_V/W_O)."""

    w_q: Tensor | None
    w_k: Tensor | None
    w_v: Tensor | None
    w_o: Tensor | None
    heads: int
    kv_heads: int

    @property
    def group_size(self) -> int:
        return self.heads // self.kv_heads

    def per_head(self, kv: Tensor) -> Tensor:
        """(kv_head, d_head, embed) -> (head, d_head, embed): each query head's group's."""
        return kv.repeat_interleave(self.group_size, dim=0)

    def rotated(self, rotation: Tensor) -> LayerWeights:
        """The same layer with its queries and keys rotated: ``rotation`` (2, d_head, d_head)
        = (R_q, R_k); W_Q -> R_q W_Q, W_K -> R_k W_K per head (no W_Q: unchanged)."""
        if self.w_q is None:
            return self
        return LayerWeights(
            rotation[0] @ self.w_q,
            rotation[1] @ self.w_k,
            self.w_v,
            self.w_o,
            self.heads,
            self.kv_heads,
        )


def _gram(a: Tensor) -> Tensor:
    """(n, d, embed) -> (n, d, d): a a^T per head."""
    return a @ a.transpose(-1, -2)


def _num_sq(p: Tensor, s: Tensor, w_o: Tensor, w_v: Tensor) -> Tensor:
    """||P^T S OV||^2 for every receiver (P, S) and sender (W_O, W_V).

    p, s: (receiver, d, embed); w_o: (sender, embed, d_s); w_v: (sender, d_s, embed)
    -> (receiver, sender). One GEMM over the embedding (the only large dimension), then
    d x d products: tr(M^T G_P M G_V) = sum(M * (G_P M G_V)), M = S W_O."""
    receivers, d, embed = s.shape
    senders, _, d_s = w_o.shape
    gram_p, gram_v = _gram(p), _gram(w_v)  # (receiver, d, d), (sender, d_s, d_s)
    m = s.reshape(receivers * d, embed) @ w_o.permute(1, 0, 2).reshape(embed, senders * d_s)
    m = m.view(receivers, d, senders, d_s).permute(0, 2, 1, 3)  # (receiver, sender, d, d_s)
    u = gram_p[:, None] @ m @ gram_v[None]  # (receiver, sender, d, d_s)
    return (m * u).sum((-1, -2))


def _norm_sq(p: Tensor, s: Tensor) -> Tensor:
    """||P^T S||^2 per head: p, s (n, d, embed) -> (n,)."""
    return (_gram(p) * _gram(s)).sum((-1, -2))


def _reading(receiver: LayerWeights, mode: str) -> tuple[Tensor, Tensor] | None:
    """(P, S), each (head, d, embed): the receiver's matrix is P^T S with S on the input side
    that mode names; None where the layer lacks the weights."""
    if mode in ("q", "k") and receiver.w_q is None:
        return None
    if mode == "v" and receiver.w_v is None:
        return None
    if mode == "q":
        return receiver.per_head(receiver.w_k), receiver.w_q
    if mode == "k":
        return receiver.w_q, receiver.per_head(receiver.w_k)
    return receiver.w_o.transpose(-1, -2), receiver.per_head(receiver.w_v)


def pair_scores(
    sender: LayerWeights, receiver: LayerWeights, rotation: Tensor | None = None
) -> dict[str, Tensor]:
    """Composition of every head of ``sender`` into every head (and K/V group) of ``receiver``:
    mode -> (sender head, receiver head) for "q", "k", "v", (sender head, receiver group) for
    "k_group", "v_group"; modes the receiver's weights do not allow are left out.
    ``rotation`` (offset, 2, d_head, d_head) (``rotary.rotations``): Q and K read through the
    stacked W_QK(delta) of those offsets (module docstring); None: without rotary."""
    w_o, w_v = sender.w_o, sender.per_head(sender.w_v)  # (head_s, embed, d), (head_s, d, embed)
    ov_sq = (_gram(w_o.transpose(-1, -2)) * _gram(w_v)).sum((-1, -2))  # (head_s,)
    turned = [receiver] if rotation is None else [receiver.rotated(r) for r in rotation]
    out = {}
    for mode in MODES:
        if _reading(receiver, mode) is None:
            continue
        variants = [receiver] if mode == "v" else turned
        readings = [_reading(v, mode) for v in variants]
        num = sum(_num_sq(*reading, w_o, w_v) for reading in readings).t()  # (head_s, head_r)
        den = sum(_norm_sq(*reading) for reading in readings)  # (head_r,)
        out[mode] = (num / (ov_sq[:, None] * den[None])).sqrt()
        if mode in ("k", "v"):
            groups = receiver.kv_heads
            num_g = num.view(num.shape[0], groups, -1).sum(-1)  # (head_s, group)
            den_g = den.view(groups, -1).sum(-1)
            out[f"{mode}_group"] = (num_g / (ov_sq[:, None] * den_g[None])).sqrt()
    return out


def layer_weights(layer, fold: bool = True) -> tuple[LayerWeights, list[str], bool]:
    """A layer's ``LayerWeights`` (``AttentionLayer``: query_key_weights, value_output_weights,
    input_scale), the reasons for what it lacks (a norm whose scale cannot be read is left
    unfolded and said), and whether a norm scale was folded in."""
    heads, kv = layer.num_heads, layer.num_kv_heads
    missing = []
    try:
        scale = layer.input_scale() if fold else None
    except ValueError as error:
        scale = None
        missing.append(f"norm not folded: {error}")
    fold_in = 1.0 if scale is None else scale.detach().double()  # (embed,)

    def split(w: Tensor, n: int) -> Tensor:
        return w.detach().double().reshape(n, -1, w.shape[-1]) * fold_in  # (n, d, embed)

    try:
        w_q, w_k = layer.query_key_weights()
        w_q, w_k = split(w_q, heads), split(w_k, kv)
    except ValueError as error:
        w_q = w_k = None
        missing.append(f"Q/K: {error}")
    try:
        w_v, w_o = layer.value_output_weights()
        w_v = split(w_v, kv)
        w_o = w_o.detach().double().reshape(w_o.shape[0], heads, -1).permute(1, 0, 2)
    except ValueError as error:
        w_v = w_o = None
        missing.append(f"V/O: {error}")
    return LayerWeights(w_q, w_k, w_v, w_o, heads, kv), missing, scale is not None


def composition_scores(
    model: HeadModel,
    samples: int = 64,
    seed: int = 0,
    fold: bool = True,
    on_layer: Callable[[int, int], None] | None = None,
    offsets: Sequence[int] | None = None,
) -> CompositionScores:
    """Q-, K- and V-composition of every pair of heads in different layers (sender earlier),
    K/V groups as receivers too, with the random baseline of each shape (``random_baseline``,
    ``samples`` draws from ``seed``). ``on_layer(i, n)`` after receiver layer i of n.
    ``offsets``: rotary-aware Q and K at these relative offsets (module docstring; ValueError
    for a model without one rotate-half rotary table); None: without rotary."""
    check_int("samples", samples, low=1, high=100_000)
    layers = model.attention_layers()
    turns = {}  # d_head -> (offset, 2, d_head, d_head)
    if offsets is not None:
        for layer in layers:
            if layer.head_dim not in turns:
                turns[layer.head_dim] = rotations(model, offsets, layer.head_dim)
    weights, missing, folded = [], {}, []
    for i, layer in enumerate(layers):
        found, why, scaled = layer_weights(layer, fold)
        weights.append(found)
        if why:
            missing[str(i)] = "; ".join(why)
        if scaled:
            folded.append(i)
    starts = _offsets([w.heads for w in weights])
    group_offsets = _offsets([w.kv_heads for w in weights])
    total, total_groups = starts[-1], group_offsets[-1]
    scores = {m: torch.full((total, total), float("nan")) for m in MODES}
    scores.update({m: torch.full((total, total_groups), float("nan")) for m in GROUP_MODES})
    shapes = {}
    for r, receiver in enumerate(weights):
        for s in range(r):
            sender = weights[s]
            if sender.w_v is None:
                continue
            shape = (int(sender.w_o.shape[-1]), _d_head(receiver), receiver.group_size)
            shapes.setdefault(shape, None)
            turn = turns.get(_d_head(receiver)) if turns else None
            for mode, block in pair_scores(sender, receiver, turn).items():
                cols = group_offsets if mode in GROUP_MODES else starts
                scores[mode][starts[s] : starts[s + 1], cols[r] : cols[r + 1]] = block.float()
        if on_layer is not None:
            on_layer(r, len(weights))
    embed = int(layers[0].embed_dim) if layers else 0
    baselines = [
        random_baseline(embed, d_s, d_r, g, samples=samples, seed=seed, rotation=turns.get(d_r))
        for d_s, d_r, g in shapes
    ]
    return CompositionScores(
        model=model.name,
        heads_per_layer=[w.heads for w in weights],
        kv_heads_per_layer=[w.kv_heads for w in weights],
        scores={m: _as_lists(t) for m, t in scores.items()},
        baselines=baselines,
        folded_layers=folded,
        folded="the scale of each layer's input norm (RMSNorm/LayerNorm weight) into its W_Q, "
        "W_K, W_V"
        if fold
        else "nothing",
        not_folded="the normalisation itself (division by RMS/std, mean subtraction), biases, "
        "QK-norm, norms after W_O, MLPs",
        rotary=ROTARY if offsets is None else rotary_aware(offsets),
        rotary_offsets=[] if offsets is None else [int(o) for o in offsets],
        missing=missing,
    )


def rotary_aware(offsets: Sequence[int]) -> str:
    """What ``CompositionScores.rotary`` says of scores at ``offsets``."""
    listed = ", ".join(str(int(o)) for o in offsets)
    return (
        f"applied: Q and K read through W_QK(delta) = (R(delta) W_Q)^T R(0) W_K, the family's "
        f"rotary, stacked over relative offsets delta = {listed} (the key delta positions "
        "before the query)"
    )


def _d_head(weights: LayerWeights) -> int:
    for w in (weights.w_q, weights.w_v):
        if w is not None:
            return int(w.shape[1])
    return 0


def _offsets(counts: Sequence[int]) -> list[int]:
    out = [0]
    for n in counts:
        out.append(out[-1] + n)
    return out


def _as_lists(scores: Tensor) -> list[list[float | None]]:
    return [[None if v != v else round(float(v), 6) for v in row] for row in scores.tolist()]


def random_baseline(
    embed: int,
    sender_d_head: int,
    receiver_d_head: int,
    group_size: int = 1,
    samples: int = 64,
    seed: int = 0,
    rotation: Tensor | None = None,
) -> Baseline:
    """The score of random matrices of the same shapes: a sender (W_O (embed, d_s), W_V
    (d_s, embed)) and a receiver group of ``group_size`` query heads sharing W_K and W_V, every
    entry standard normal (the score does not depend on each factor's scale), ``samples``
    draws from ``seed``; the mean and standard deviation of each mode's score (of the group's
    first query head for "q", "k", "v"). ``rotation``: the rotary-aware scores' rotations
    (``pair_scores``), applied to the random receiver as to the model's."""
    sizes = {
        "embed": embed,
        "sender_d_head": sender_d_head,
        "receiver_d_head": receiver_d_head,
        "group_size": group_size,
    }
    for name, value in sizes.items():
        check_int(name, value, low=1, high=1 << 20)
    check_int("samples", samples, low=1, high=100_000)
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    drawn = {m: [] for m in MODES + GROUP_MODES}
    for _ in range(samples):
        sender = LayerWeights(
            None, None, draw(1, sender_d_head, embed), draw(1, embed, sender_d_head), 1, 1
        )
        receiver = LayerWeights(
            draw(group_size, receiver_d_head, embed),
            draw(1, receiver_d_head, embed),
            draw(1, receiver_d_head, embed),
            draw(group_size, embed, receiver_d_head),
            group_size,
            1,
        )
        for mode, block in pair_scores(sender, receiver, rotation).items():
            drawn[mode].append(float(block[0, 0]))
    values = {m: torch.tensor(v, dtype=torch.float64) for m, v in drawn.items()}
    return Baseline(
        embed_dim=embed,
        sender_d_head=sender_d_head,
        receiver_d_head=receiver_d_head,
        group_size=group_size,
        samples=samples,
        seed=seed,
        mean={m: float(v.mean()) for m, v in values.items()},
        std={m: float(v.std()) if samples > 1 else 0.0 for m, v in values.items()},
    )
