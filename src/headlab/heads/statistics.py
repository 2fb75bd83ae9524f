"""What each head attends to, averaged over the real (non-padding) query tokens of a corpus.

Per layer x head, with w = the head's attention weights of one query q (a row over keys k):
    entropy            -sum_k w_k ln w_k  (nats; ln(n_keys) is uniform, 0 is one-hot)
    max_weight         max_k w_k
    <special>          weight on each of the model's special positions: "cls" and "sep" for
                       BERT ([CLS] first, [SEP] last), "first" for a decoder (the attention sink)
    self, prev         weight on the query's own position and on the one before it (queries > 0)
    distance           mean attention distance sum_k w_k |q - k| (tokens)
    contribution_norm  ||head output @ W_O block^T||_2, the head's share of the layer's output
Means are over query tokens of all texts (longer texts weigh more). Any model behind
``headlab.models.interface.HeadModel`` works; ``detectors`` adds the causal models' head kinds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from headlab.models.interface import HeadModel

COMMON = ("entropy", "max_weight", "self", "prev", "distance", "contribution_norm")


def metric_names(special: list[str]) -> tuple[str, ...]:
    """The metrics of a model whose special positions are ``special`` (in table order)."""
    return ("entropy", "max_weight", *special, "self", "prev", "distance", "contribution_norm")


@dataclass(frozen=True)
class HeadStatistics:
    """metrics[name]: (layer, head) nested lists of floats; see the module docstring.

    detectors[name]: (layer, head) scores in [0, 1] of the head kinds of ``detectors`` (decoders).
    """

    model: str
    n_texts: int
    num_layers: int
    num_heads: int
    metrics: dict[str, list[list[float]]]
    detectors: dict[str, list[list[float]]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {
            "model": self.model,
            "n_texts": self.n_texts,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "metrics": self.metrics,
        }
        if self.detectors:
            out["detectors"] = self.detectors
        return out

    def top(self, name: str, count: int = 5) -> list[tuple[int, int, float]]:
        """The ``count`` heads with the highest ``name`` (a metric or a detector), best first."""
        grid = self.detectors.get(name) or self.metrics[name]
        cells = [(l, h, v) for l, row in enumerate(grid) for h, v in enumerate(row)]
        return sorted(cells, key=lambda c: -c[2])[:count]


def batch_sums(
    weights: Tensor, contributions: Tensor, real: Tensor, special: dict[str, Tensor]
) -> dict[str, Tensor]:
    """Sums over real query tokens. weights (batch, head, q_pos, k_pos); contributions (batch,
    head, q_pos, E); real (batch, pos) bool; special: name -> (batch,) key index.
    Returns name -> (head,) sums ("prev" over queries 1.. only)."""
    q_real = real[:, None, :].to(weights.dtype)  # (batch, 1, q_pos)
    batch, heads, pos, k_pos = weights.shape
    offsets = (
        torch.arange(pos, dtype=weights.dtype)[:, None] - torch.arange(k_pos, dtype=weights.dtype)
    ).abs()  # (q_pos, k_pos) |q - k|
    per_query = {
        "entropy": -(weights * weights.clamp_min(1e-30).log()).sum(dim=-1),
        "max_weight": weights.amax(dim=-1),
        "self": weights.diagonal(dim1=-2, dim2=-1),
        "distance": (weights * offsets).sum(dim=-1),
        "contribution_norm": contributions.norm(dim=-1),
    }
    for name, index in special.items():
        where = index.view(batch, 1, 1, 1).expand(batch, heads, pos, 1)
        per_query[name] = weights.gather(-1, where).squeeze(-1)
    sums = {name: (value * q_real).sum(dim=(0, 2)) for name, value in per_query.items()}
    prev = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (batch, head, q_pos - 1), queries 1..
    sums["prev"] = (prev * q_real[..., 1:]).sum(dim=(0, 2))
    return sums


def head_statistics(
    model: HeadModel,
    texts: list[str],
    *,
    batch_size: int = 16,
    max_length: int = 128,
    detector_length: int = 0,
    on_batch=None,
) -> HeadStatistics:
    """Per-head attention statistics of ``model`` over ``texts`` (explicit attention path).

    detector_length: for a causal model, also score the previous-token, duplicate-token and
    induction heads on random token sequences of this length repeated twice (0: skip).
    on_batch: called with the number of texts done after each batch (progress).
    Needs at least one text.
    """
    if not texts:
        raise ValueError("expected at least one text, got none")
    heads = model.heads_per_layer
    totals: dict[str, list[Tensor]] = {}
    n_queries = n_prev = 0
    seen_ids: list[Tensor] = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            batch = model.tokenize(texts[start : start + batch_size], max_length)
            seen_ids.append(batch.input_ids[batch.attention_mask])
            _, traces = model.trace_batch(batch)
            special = model.special_positions(batch)
            lengths = batch.attention_mask.sum(dim=1)
            n_queries += int(lengths.sum())
            n_prev += int((lengths - 1).sum())
            for layer, t in enumerate(traces):
                sums = batch_sums(t.weights, t.contributions, batch.attention_mask, special)
                for name, value in sums.items():
                    totals.setdefault(name, [torch.zeros(h, dtype=torch.float64) for h in heads])
                    totals[name][layer] += value.to(torch.float64)
            if on_batch is not None:
                on_batch(min(start + batch_size, len(texts)))
    names = metric_names(list(special))
    metrics = {
        name: [(v / max(n_prev if name == "prev" else n_queries, 1)).tolist() for v in totals[name]]
        for name in names
    }
    detected = {}
    if detector_length and model.causal:
        from headlab.heads.detectors import detect_heads

        detected = detect_heads(model, torch.cat(seen_ids).unique(), detector_length)
    return HeadStatistics(model.name, len(texts), model.num_layers, max(heads), metrics, detected)
