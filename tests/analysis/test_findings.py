"""A constructed case for every finding code, asserting exactly which codes appear."""

from __future__ import annotations

import json

import pytest
import torch

from headlab import MultiHeadAttention
from headlab.analysis import compare, explain

E, H, B, LQ, LK = 12, 4, 2, 5, 7  # distinct sizes


def _module(seed=0, **kwargs):
    torch.manual_seed(seed)
    m = MultiHeadAttention(E, H, batch_first=True, **kwargs)
    with torch.no_grad():
        m.in_proj_weight.normal_(0, E**-0.5)
        m.in_proj_bias.uniform_(-0.1, 0.1)
        m.out_proj.weight.normal_(0, E**-0.5)
        m.out_proj.bias.uniform_(-0.1, 0.1)
    return m


def _x(length, seed):
    return torch.randn(B, length, E, generator=torch.Generator().manual_seed(seed))


def _codes(c):
    return sorted(f.code for f in c.findings)


def test_same_config():
    m = _module()
    c = compare(m, m.with_num_heads(H), _x(LQ, 1))
    assert _codes(c) == ["same_config"] and c.identical and c.gradients_equal


def test_single_key():
    m = _module()
    c = compare(m, m.with_num_heads(1), _x(LQ, 1), _x(1, 2), _x(1, 3))
    assert _codes(c) == ["single_key"]
    assert c.findings[0].fraction == 1.0
    assert c.verdict in ("identical", "close")


def test_causal_first_row_is_single_key_and_the_rest_partition():
    m = _module()
    c = compare(m, m.with_num_heads(1), _x(LQ, 1), is_causal=True)
    fractions = {f.code: f.fraction for f in c.findings}
    assert fractions == pytest.approx({"single_key": 1 / LQ, "partition": 1 - 1 / LQ})
    assert c.rows_equal[:, 0].all()


def test_saturated_same_key():
    m = _module()
    with torch.no_grad():
        m.in_proj_weight[: 2 * E].copy_(torch.cat([torch.eye(E), torch.eye(E)]))
        m.in_proj_bias[: 2 * E].zero_()
    query = torch.full((B, LQ, E), 10.0)
    key = _x(LK, 2)
    key[:, 3] = 10.0  # one key aligned with every query, in every head's slice
    c = compare(m, m.with_num_heads(1), query, key, _x(LK, 3))
    assert _codes(c) == ["saturated_same_key"]
    assert c.verdict in ("identical", "close")
    assert "one-hot" in c.findings[0].detail


def test_uniform_gives_equal_outputs_but_unequal_gradients():
    m = _module()
    with torch.no_grad():
        m.in_proj_weight[E : 2 * E].zero_()  # W_K = 0: every score in a row is equal
    c = compare(m, m.with_num_heads(1), _x(LQ, 1), _x(LK, 2), _x(LK, 3))
    assert _codes(c) == ["uniform"]
    assert c.verdict in ("identical", "close")
    assert not c.gradients_equal
    assert c.gradient_diffs["in_proj_weight"] > 1e-3
    assert "gradients do not" in c.findings[0].detail
    assert "gradients of the shared weights differ" in explain(c.result())


def test_identical_values():
    m = _module()
    value = _x(1, 3).expand(B, LK, E).contiguous()
    c = compare(m, m.with_num_heads(1), _x(LQ, 1), _x(LK, 2), value)
    assert _codes(c) == ["identical_values"]
    assert c.verdict in ("identical", "close")


def test_partition_is_the_general_case():
    m = _module()
    c = compare(m, m.with_num_heads(1), _x(LQ, 1))
    assert _codes(c) == ["partition"] and c.verdict == "different"
    assert "total variation" in c.findings[0].detail


def test_to_dict_has_exactly_the_documented_fields():
    m = _module()
    result = compare(m, m.with_num_heads(2), _x(LQ, 1)).result()
    doc = json.loads(json.dumps(result.to_dict()))
    assert set(doc) == {
        "verdict",
        "identical",
        "max_abs_diff",
        "rel_diff",
        "gradients_equal",
        "findings",
        "params",
    }
    assert set(doc["params"]) == {"a", "b"}
    for finding in doc["findings"]:
        assert set(finding) == {"code", "fraction", "detail", "measures"}
        assert finding["measures"]["rows"] / finding["measures"]["of_rows"] == finding["fraction"]
    fractions = [f["fraction"] for f in doc["findings"]]
    assert fractions == sorted(fractions, reverse=True)


def test_explanation_is_written_from_the_numbers():
    m = _module()
    c = compare(m, m.with_num_heads(1), _x(LQ, 1))
    text = explain(c.result())
    assert f"{c.max_abs_diff:.3g}" in text and f"{c.rel_diff:.3g}" in text
    assert "4 heads of 3 and 1 head of 12" in text
    assert f"{c.params['a']:,}" in text


def test_modules_with_other_widths_are_rejected():
    with pytest.raises(ValueError, match=r"same widths, got \(embed_dim, kdim, vdim\)"):
        compare(_module(), MultiHeadAttention(8, 2, batch_first=True), _x(LQ, 1))


def test_partition_measures_agree_with_the_traces():
    m = _module()
    few = m.with_num_heads(1)
    x = _x(LQ, 1)
    finding = compare(m, few, x).findings[0]
    measures = finding.measures
    assert (measures["heads_many"], measures["head_dim_many"]) == (H, E // H)
    assert (measures["heads_few"], measures["head_dim_few"]) == (1, E)
    # Independently: each head's TV distance to the single head, averaged over every row.
    w_many = m.trace(x, x, x).weights  # (batch, head, q_pos, k_pos)
    w_few = few.trace(x, x, x).weights
    tv = 0.5 * (w_many - w_few).abs().sum(-1).mean(dim=(0, 2)).detach()  # (head,)
    assert measures["total_variation_per_head"] == pytest.approx(tv.tolist(), abs=1e-6)
    assert measures["total_variation_mean"] == pytest.approx(float(tv.mean()), abs=1e-6)
    assert (measures["rows"], measures["of_rows"]) == (B * LQ, B * LQ)


def test_the_prose_is_written_from_the_measures():
    from headlab.analysis.explain import describe

    m = _module()
    c = compare(m, m.with_num_heads(1), _x(LQ, 1))
    finding = c.findings[0]
    changed = {**finding.measures, "heads_many": 99, "total_variation_mean": 0.125}
    text = describe(finding.code, changed)
    assert "the 99 softmaxes" in text and "(mean 0.12)" in text
    assert finding.detail == describe(finding.code, finding.measures)
    assert f"{finding.detail}." in explain(c.result())
    with pytest.raises(ValueError, match="code must be a finding code, got 'nope'"):
        describe("nope", {})


def test_a_sides_scores_are_gone_before_the_other_side_runs(monkeypatch):
    """Issue 31 (compare's memory): the findings read a side's scores as soon as it has run
    (``side_facts``), so when the second side's trace starts only the first side's float
    weights of (batch, head, q_pos, k_pos) are alive (beside its visible keys, a bool), not its
    scores too. Counted with the garbage collector's view of live tensors."""
    import gc

    a = MultiHeadAttention(12, 3, batch_first=True)
    b = a.with_num_heads(1)
    x = torch.randn(2, 7, 12, generator=torch.Generator().manual_seed(5))
    first_side = (2, 3, 7, 7)  # (batch, head, q_pos, k_pos) of the 3-head side
    alive = []
    trace = MultiHeadAttention.trace

    def counting(self, *args, **kwargs):
        if self.num_heads == 1 and not torch.is_grad_enabled() and not alive:
            gc.collect()
            alive.append(
                sum(
                    1
                    for o in gc.get_objects()
                    if type(o) is torch.Tensor
                    and o.is_floating_point()
                    and tuple(o.shape) == first_side
                )
            )
        return trace(self, *args, **kwargs)

    monkeypatch.setattr(MultiHeadAttention, "trace", counting)
    c = compare(a, b, x)
    assert alive == [1]  # the weights, which the comparison returns
    assert c.weights_a.shape == first_side
