"""Node attribution and the patching sweep against outside references, in float64.

- The sweep (``head_patching``): every node's entry, and every (node, position) entry, equals a
  run of transformers' eager model with that node's output replaced by a forward hook
  (node_reference.py), on a tiny random Llama (GQA: K/V groups as units) and GPT-2.
- Node attribution (``nodes``): every node's score equals the derivative, by central finite
  differences on the same eager model, of the metric when the node's output moves from the
  clean towards the corrupted run; per position too.
- Where the metric is linear in every node (a Llama whose parts besides the residual adds are
  linear, test_attribution's ``linear_llama``): attribution (and its IG variant) equals the
  exact sweep, node by node and position by position.
"""

import pytest
import torch
from node_reference import EagerNodes, float64_model, task
from test_attribution import linear_llama

from headlab.circuits.head_patching import head_patching
from headlab.circuits.node_attribution import node_attribution
from headlab.models.hf import attach
from headlab.results.node_scores import NodeScores


def f64(values):
    return torch.tensor(values, dtype=torch.float64)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def family(request):
    clean, corrupted, targets, metric = task()
    model = attach(float64_model(request.param), announce=False)
    reference = EagerNodes(request.param, clean, corrupted, targets)
    return model, reference, clean, corrupted, metric


def test_the_units_are_heads_groups_and_mlps(family):
    model, _, clean, corrupted, metric = family
    scores = node_attribution(model, clean, corrupted, metric)
    grouped = model.config.model_type == "llama"
    assert scores.nodes[:3] == ["0.0", "0.1", "0.2"]
    assert ("0.g1" in scores.nodes) == grouped and "mlp.1" in scores.nodes
    assert NodeScores.from_dict(scores.to_dict()) == scores


def test_every_sweep_entry_equals_a_hooked_eager_run(family):
    model, reference, clean, corrupted, metric = family
    sweep = head_patching(model, clean, corrupted, metric, by_position=True, chunk=5)
    clean_value = reference.value()
    assert sweep.clean_metric == pytest.approx(clean_value, abs=1e-9)
    expected = f64([reference.value(n) - clean_value for n in sweep.nodes])
    assert float(expected.abs().max()) > 1e-2  # the corruption moves the metric
    torch.testing.assert_close(f64(sweep.scores), expected, rtol=0, atol=1e-9)
    positions = range(0, clean.shape[1], 3)
    for i, node in list(enumerate(sweep.nodes))[::2]:  # heads, groups and MLPs among them
        got = f64([sweep.by_position[i][p] for p in positions])
        want = f64([reference.value(node, pos=p) - clean_value for p in positions])
        torch.testing.assert_close(got, want, rtol=0, atol=1e-9)


def test_node_attribution_is_the_derivative_of_moving_the_node(family):
    model, reference, clean, corrupted, metric = family
    scores = node_attribution(model, clean, corrupted, metric, by_position=True)
    eps = 1e-4

    def derivative(node, pos=None):
        return (reference.value(node, eps, pos) - reference.value(node, -eps, pos)) / (2 * eps)

    expected = f64([derivative(n) for n in scores.nodes])
    scale = float(expected.abs().max())
    assert scale > 1e-2
    torch.testing.assert_close(f64(scores.scores), expected, rtol=0, atol=1e-6 * scale)
    node = scores.top(1)[0][0]
    row = scores.by_position[scores.nodes.index(node)]
    want = f64([derivative(node, p) for p in range(clean.shape[1])])
    torch.testing.assert_close(f64(row), want, rtol=0, atol=1e-6 * scale)
    assert sum(row) == pytest.approx(scores.score(node), abs=1e-9 * scale)


def test_on_a_linear_model_attribution_equals_the_exact_sweep():
    clean, corrupted, _, metric = task(seed=7)
    model = attach(linear_llama().double(), announce=False)
    sweep = head_patching(model, clean, corrupted, metric, by_position=True)
    exact = f64(sweep.scores)
    scale = float(exact.abs().max())
    assert scale > 1e-2
    for method in ("nodes", "nodes-ig"):
        scores = node_attribution(
            model, clean, corrupted, metric, method=method, steps=3, by_position=True
        )
        assert scores.nodes == sweep.nodes
        torch.testing.assert_close(f64(scores.scores), exact, rtol=0, atol=1e-9 * scale)
        torch.testing.assert_close(
            f64(scores.by_position), f64(sweep.by_position), rtol=0, atol=1e-9 * scale
        )
    # linear: patching every position at once is the sum of patching each alone
    summed = f64(sweep.by_position).sum(1)
    torch.testing.assert_close(summed, exact, rtol=0, atol=1e-9 * scale)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"method": "edges"}, "method must be one of nodes, nodes-ig, got 'edges'"),
        ({"method": "nodes-ig", "steps": 0}, "steps must be between 1 and 10000, got 0"),
    ],
)
def test_bad_options_are_refused_before_the_model_runs(options, message):
    clean, corrupted, _, metric = task()
    with pytest.raises(ValueError, match=message):
        node_attribution(object(), clean, corrupted, metric, **options)


def test_unequal_pairs_are_refused():
    clean, corrupted, _, metric = task()
    with pytest.raises(ValueError, match="of one shape"):
        head_patching(object(), clean, corrupted[:, :5], metric)
