"""What each head attends to, averaged over the real (non-padding) query tokens of a corpus.

Per layer x head, with w = the head's attention weights of one query (a row over keys):
    entropy            -sum_k w_k ln w_k  (nats; ln(n_keys) is uniform, 0 is one-hot)
    max_weight         max_k w_k
    cls, sep           weight on the first token ([CLS]) and on the text's last one ([SEP])
    self, prev         weight on the query's own position and on the one before it (queries > 0)
    contribution_norm  ||head output @ W_O block^T||_2, the head's share of the layer's output
Means are over query tokens of all texts (longer texts weigh more).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from headlab.models import Encoder

METRICS = ("entropy", "max_weight", "cls", "sep", "self", "prev", "contribution_norm")


@dataclass(frozen=True)
class HeadStatistics:
    """metrics[name]: (layer, head) nested lists of floats; see the module docstring."""

    model: str
    n_texts: int
    num_layers: int
    num_heads: int
    metrics: dict[str, list[list[float]]]

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "n_texts": self.n_texts,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "metrics": self.metrics,
        }


def _batch_sums(weights: Tensor, contributions: Tensor, real: Tensor) -> dict[str, Tensor]:
    """Sums over real query tokens. weights (batch, head, q_pos, k_pos); contributions (batch,
    head, q_pos, E); real (batch, pos) bool. Returns name -> (head,) sums."""
    q_real = real[:, None, :].to(weights.dtype)  # (batch, 1, q_pos)
    last = real.sum(dim=1) - 1  # (batch,) position of [SEP]
    batch, heads, pos, _ = weights.shape
    sep_index = last.view(batch, 1, 1, 1).expand(batch, heads, pos, 1)
    per_query = {
        "entropy": -(weights * weights.clamp_min(1e-30).log()).sum(dim=-1),
        "max_weight": weights.amax(dim=-1),
        "cls": weights[..., 0],
        "sep": weights.gather(-1, sep_index).squeeze(-1),
        "self": weights.diagonal(dim1=-2, dim2=-1),
        "contribution_norm": contributions.norm(dim=-1),
    }
    sums = {name: (value * q_real).sum(dim=(0, 2)) for name, value in per_query.items()}
    prev = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (batch, head, q_pos - 1), queries 1..
    sums["prev"] = (prev * q_real[..., 1:]).sum(dim=(0, 2))
    return sums


def head_statistics(
    encoder: Encoder, texts: list[str], *, batch_size: int = 16, max_length: int = 128
) -> HeadStatistics:
    """Per-head attention statistics of ``encoder`` over ``texts`` (explicit attention path).

    Assumes BERT's template: [CLS] first, [SEP] last. Needs at least one text.
    """
    if not texts:
        raise ValueError("expected at least one text, got none")
    heads = encoder.heads_per_layer
    totals = {m: [torch.zeros(h, dtype=torch.float64) for h in heads] for m in METRICS}
    n_queries = 0
    n_prev = 0
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            batch = encoder.tokenize(texts[start : start + batch_size], max_length)
            _, traces = encoder.model.trace(
                batch.input_ids, batch.token_type_ids, batch.attention_mask
            )
            lengths = batch.attention_mask.sum(dim=1)
            n_queries += int(lengths.sum())
            n_prev += int((lengths - 1).sum())
            for layer, t in enumerate(traces):
                sums = _batch_sums(t.weights, t.contributions, batch.attention_mask)
                for name in METRICS:
                    totals[name][layer] += sums[name].to(torch.float64)
    metrics = {
        name: [(v / (n_prev if name == "prev" else n_queries)).tolist() for v in totals[name]]
        for name in METRICS
    }
    return HeadStatistics(encoder.name, len(texts), encoder.num_layers, max(heads), metrics)
