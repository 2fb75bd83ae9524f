"""How redundant the key/query projections of a trained model's heads are (Cordonnier et al. 2020).

Head i scores query token x against key token y through the bilinear form
    B_i = W_Q_i^T W_K_g(i)          (embed_dim, embed_dim), rank <= d_head
(rotary positions, if any, act between the two and are left aside here). Per layer:

- spectrum: the singular values of the concatenation [B_1 | ... | B_H] (d_model, head * d_model),
  normalised to sum to one, and its effective rank exp(entropy) (Roy and Vetterli 2007). Heads
  that read disjoint input directions give an effective rank near H * d_head; heads that share
  their query subspace give much less.
- shared key/query at rank k, from the trained weights without retraining: U_k = the top k left
  singular vectors of [B_1 | ... | B_H] (the query directions all heads share), V_k = the top k
  right singular vectors of [B_1; ...; B_H] (the key directions), and
      W_Q' = W_Q U_k U_k^T,   W_K' = W_K V_k V_k^T   (so B_i' = U_k U_k^T B_i V_k V_k^T)
  i.e. every head computes its query from one shared k-wide projection X U_k (and its key from
  X V_k): a Tucker form with a k x k core per head; Cordonnier et al.'s collaborative heads are
  its diagonal-core case. At k = embed_dim it is the model itself.

The variant is judged by ``headlab.heads.quality``: mean cosine of an encoder's embeddings,
perplexity of a decoder.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor

from headlab.attention.functional import entropy
from headlab.heads.quality import measures, reference
from headlab.limits import check_sizes
from headlab.models.interface import AttentionLayer, HeadModel
from headlab.results.redundancy_result import CurvePoint, LayerSpectrum, RedundancyResult


def bilinear_forms(module: AttentionLayer) -> np.ndarray:
    """(head, embed_dim, embed_dim) float64: B_i = W_Q_i^T W_K_g(i) for every query head i
    (for inspection and tests; the measurement never builds them)."""
    w_q, w_k = (w.detach().double().numpy() for w in module.query_key_weights())
    heads, kv, d = module.num_heads, module.num_kv_heads, module.head_dim
    q = w_q.reshape(heads, d, -1)  # (head, d_head, d_model)
    k = w_k.reshape(kv, d, -1)[np.arange(heads) // (heads // kv)]  # (head, d_head, d_model)
    return np.einsum("hdi,hdj->hij", q, k)


def effective_rank(singular_values: np.ndarray) -> float:
    """exp(entropy of the singular values normalised to sum to one)."""
    p = torch.as_tensor(singular_values / singular_values.sum(), dtype=torch.float64)
    return float(entropy(p).exp())


def shared_subspaces(module: AttentionLayer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(singular values of [B_1 | ... | B_H] (d_model,), U (d_model, d_model) query directions,
    V (d_model, d_model) key directions), orthonormal columns by decreasing singular value.

    U diagonalises sum_i B_i B_i^T = sum_i W_Q_i^T (W_K_i W_K_i^T) W_Q_i and V diagonalises
    sum_i B_i^T B_i: two d_model x d_model eigenproblems built in d_head space, never the
    (d_model, head * d_model) matrix.
    """
    w_q, w_k = (w.detach().double() for w in module.query_key_weights())
    heads, kv, d = module.num_heads, module.num_kv_heads, module.head_dim
    q = w_q.reshape(heads, d, -1)  # (head, d_head, d_model)
    k = w_k.reshape(kv, d, -1)[torch.arange(heads) // (heads // kv)]  # (head, d_head, d_model)
    kk = k @ k.transpose(1, 2)  # (head, d_head, d_head)
    qq = q @ q.transpose(1, 2)
    left = torch.einsum("hai,hab,hbj->ij", q, kk, q)  # sum_i B_i B_i^T   (d_model, d_model)
    right = torch.einsum("hai,hab,hbj->ij", k, qq, k)  # sum_i B_i^T B_i  (d_model, d_model)
    values, u = torch.linalg.eigh(left)
    _, v = torch.linalg.eigh(right)
    s = values.clamp_min(0).sqrt().flip(0).numpy()
    return s, u.flip(1).numpy(), v.flip(1).numpy()


def shared_projections(
    module: AttentionLayer,
    rank: int,
    subspaces: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> tuple[Tensor, Tensor]:
    """(W_Q U_k U_k^T, W_K V_k V_k^T): the layer's W_Q and W_K reading only the shared
    rank-``rank`` query and key subspaces (module docstring); ``subspaces`` is
    ``shared_subspaces`` of the layer, computed here when not given. ValueError for rank
    outside [1, embed_dim]."""
    e = module.embed_dim
    if not 1 <= rank <= e:
        raise ValueError(f"rank must be between 1 and embed_dim={e}, got {rank}")
    _, u, v = subspaces or shared_subspaces(module)
    cut = []
    with torch.no_grad():
        for w, basis in zip(module.query_key_weights(), (u[:, :rank], v[:, :rank]), strict=True):
            proj = torch.as_tensor(basis @ basis.T, dtype=torch.float64)
            cut.append((w.detach().double() @ proj).to(w.dtype))
    return cut[0], cut[1]


def default_ranks(model: HeadModel) -> tuple[int, ...]:
    """The key/query width H * d_head of the first layer divided by 1, 2, 4, 8 and 16."""
    module = model.attention_layers()[0]
    width = min(module.num_heads * module.head_dim, module.embed_dim)
    return tuple(max(1, width // f) for f in (1, 2, 4, 8, 16))


MAX_RANK = 2**16  # a shared key/query rank asked beyond this is a typo (widths are smaller)


def check_ranks(ranks: object) -> tuple[int, ...]:
    """The shared ranks asked: at least one, each in [1, MAX_RANK] (ValueError naming
    ``ranks``); the model's own width is checked once it is loaded."""
    return check_sizes("ranks", ranks, high=MAX_RANK)


def measure_redundancy(
    model: HeadModel,
    texts: list[str],
    *,
    ranks: tuple[int, ...] | None = None,
    max_length: int = 64,
    batch_size: int = 16,
    on_step: Callable[[int, int], None] | None = None,
) -> RedundancyResult:
    """Spectra of every layer, then the model with every layer's key/query cut to each rank.
    ValueError naming ``ranks`` for a rank outside [1, embed_dim], before any work."""
    ranks = default_ranks(model) if ranks is None else ranks
    modules = model.attention_layers()
    # shared_projections checks too, but only after the spectra and reference
    ranks = check_sizes("ranks", ranks, high=min(m.embed_dim for m in modules))
    total, done = len(modules) + len(ranks) + 1, 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_step is not None:
            on_step(done, total)

    layers: list[LayerSpectrum] = []
    bases = []
    for i, module in enumerate(modules):
        bases.append(shared_subspaces(module))
        top = bases[-1][0][: module.embed_dim]
        width = min(module.num_heads * module.head_dim, module.embed_dim)
        layers.append(LayerSpectrum(i, (top / top.sum()).tolist(), effective_rank(top), width))
        tick()
    original = reference(model, texts, max_length, batch_size)
    base = measures(model, texts, original, max_length, batch_size)
    tick()
    e = modules[0].embed_dim
    curve = [CurvePoint(rank=e, fraction=1.0, original=True, measures=base)]
    for k in ranks:
        cut = {i: shared_projections(m, k, bases[i]) for i, m in enumerate(modules)}
        variant = model.with_query_key_weights(cut)
        row = measures(variant, texts, original, max_length, batch_size)
        curve.append(CurvePoint(rank=k, fraction=k / e, original=False, measures=row))
        tick()
    return RedundancyResult(
        model=model.name,
        n_texts=len(texts),
        embed_dim=e,
        qk_width=modules[0].num_heads * modules[0].head_dim,
        layers=layers,
        curve=curve,
    )
