"""EAP-IG's two schedules (Hanna et al. 2024) against what they must be.

- ``eap-ig`` (their EAP-IG-inputs) is the left Riemann sum of g(alpha) = write . dm/dx_v with
  the embeddings at corrupted + alpha (clean - corrupted), alpha = k / m, k = 0 .. m - 1;
  on the activations (their get_scores_ig_activations) the right one, k = 1 .. m, with one
  node's output at a time moved on that line (cut from the gradient, as theirs, or not).
  Against the integral of g computed in the test by Gauss-Legendre quadrature (float64): the
  sum's error is, by Euler-Maclaurin,
  (g(0) - g(1)) / (2 m) for the left sum and the opposite for the right one, up to O(1 / m^2):
  which end is in the sum and that the gradient is averaged over the steps.
- At m = 1 every run of the activation methods is at the clean end: ``eap-ig-senders`` (each
  edge over the runs of its own sender's node, the gradient flowing through it) is EAP; Hanna
  et al.'s (every run for every edge, the moved output a constant that cuts the gradient) is
  EAP where no node after the receiver is cut, and zero in the run that holds the receiver's own
  node.
"""

import numpy as np
import pytest
import torch
from test_attribution import _task
from test_path_patching import sharp

from headlab.circuits.attribution import attribution_scores, edge_attribution
from headlab.circuits.moved import Moved
from headlab.circuits.patching import Patcher
from headlab.models.hf import attach


def _integral(patcher, edges, held, nodes=12):
    """The integral over alpha in [0, 1] of g(alpha), Gauss-Legendre with ``nodes`` points."""
    x, w = np.polynomial.legendre.leggauss(nodes)
    alphas, weights = (x + 1) / 2, w / 2
    values = [attribution_scores(patcher, edges, [float(a)], moved=[held]) for a in alphas]
    return sum(float(c) * v for c, v in zip(weights, values, strict=True))


MOVES = [
    (None, 1),
    (Moved("attention", 1, cut=True), -1),
    (Moved("mlp", 0, cut=True), -1),
    (Moved("attention", 0), -1),
    (Moved("mlp", 1), -1),
]


@pytest.mark.parametrize(("held", "side"), MOVES)
def test_riemann_sums_converge_to_the_integral(held, side):
    clean, corrupted, metric = _task(length=7)
    model = attach(sharp("llama").double())
    patcher = Patcher(model, clean, corrupted, metric)
    edges = list(patcher.graph.edges)
    integral = _integral(patcher, edges, held)
    ends = [attribution_scores(patcher, edges, [a], moved=[held]) for a in (0.0, 1.0)]
    scale = float(integral.abs().max())
    jump = float((ends[0] - ends[1]).abs().max())
    assert scale > 1e-3 and jump > 1e-2 * scale  # g moves along the line
    for m in (8, 16):
        ks = range(m) if side == 1 else range(1, m + 1)
        riemann = attribution_scores(patcher, edges, [k / m for k in ks], moved=[held])
        first_order = side * (ends[0] - ends[1]) / (2 * m)
        error = riemann - integral
        # the sum is off by the Euler-Maclaurin term; what is left is O(1 / m^2)
        assert float(error.abs().max()) > 0.3 * float(first_order.abs().max())
        torch.testing.assert_close(error, first_order, rtol=0, atol=0.1 * jump / m)


def test_activations_at_the_clean_end():
    """m = 1: every run is at the clean end. eap-ig-senders is EAP; Hanna et al.'s is EAP for
    the edges into the logits (no node after them to cut) and EAP times (runs - 1) / runs for
    those into the last MLP (the run that holds that MLP cuts its input from the metric)."""
    clean, corrupted, metric = _task()
    model = attach(sharp("llama").double())
    patcher = Patcher(model, clean, corrupted, metric)
    eap = np.array(edge_attribution(model, clean, corrupted, metric, patcher=patcher).scores)
    assert np.abs(eap).max() > 1e-3

    def at_one(method):
        scores = edge_attribution(
            model, clean, corrupted, metric, method=method, steps=1, patcher=patcher
        )
        return np.array(scores.scores), scores.edges

    senders, _ = at_one("eap-ig-senders")
    np.testing.assert_allclose(senders, eap, rtol=0, atol=1e-9 * np.abs(eap).max())
    hanna, names = at_one("eap-ig-activations")
    layers = model.model.config.num_hidden_layers
    runs = 1 + 2 * layers  # the embeddings, then each layer's attention and MLP
    logits = np.array([n.endswith("->logits") for n in names])
    last_mlp = np.array([n.endswith(f"->mlp.{layers - 1}") for n in names])
    assert logits.any() and last_mlp.any()
    want = np.where(logits, eap, eap * (runs - 1) / runs)
    chosen = logits | last_mlp
    np.testing.assert_allclose(hanna[chosen], want[chosen], rtol=0, atol=1e-9 * np.abs(eap).max())


@pytest.mark.parametrize("method", ["eap", "eap-ig-senders", "eap-ig-activations"])
def test_edges_into_late_layers_alone_score_as_in_the_whole_graph(method):
    """A run starts at the first layer that moves or receives and keeps only the receivers'
    layers (the backward stops there): a subset of edges into the last layer scores as in the
    run over every edge."""
    clean, corrupted, metric = _task()
    model = attach(sharp("llama").double())
    patcher = Patcher(model, clean, corrupted, metric)
    last = model.model.config.num_hidden_layers - 1
    whole = edge_attribution(
        model, clean, corrupted, metric, method=method, steps=2, patcher=patcher
    )
    late = [e for e in whole.edges if e.split("->")[1].startswith((f"{last}.", f"mlp.{last}"))]
    assert late
    alone = edge_attribution(
        model, clean, corrupted, metric, method=method, steps=2, edges=late, patcher=patcher
    )
    want = np.array([whole.scores[whole.edges.index(e)] for e in late])
    assert np.abs(want).max() > 1e-3
    np.testing.assert_allclose(alone.scores, want, rtol=0, atol=1e-9 * np.abs(want).max())
