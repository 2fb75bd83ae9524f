"""``coupling_comparison``: the ``headlab grad`` measurement as a library call."""

from __future__ import annotations

import json

import numpy as np
import pytest

from headlab.analysis.coupling import gradient_coupling
from headlab.analysis.grad import coupling_comparison
from headlab.analysis.scenarios import CompareRequest, build


@pytest.mark.parametrize(("heads", "vs_heads"), [(4, 1), (2, 4)])
def test_separate_heads_are_uncoupled_and_merged_ones_are_not(heads, vs_heads):
    setup = CompareRequest(
        d_model=12,
        heads=heads,
        vs_heads=vs_heads,
        seq_len=5,
        batch=2,
        init="normal",
        seed=3,
        output_projection=True,
    )
    result = coupling_comparison(setup)
    blocks = max(heads, vs_heads)
    assert result.blocks == blocks
    assert [s.num_heads for s in result.sides] == [heads, vs_heads]
    for side in result.sides:
        matrix = np.array(side.coupling)
        assert matrix.shape == (blocks, blocks)
        off = matrix[~np.eye(blocks, dtype=bool)]
        # With as many heads as blocks, block i's gradient never sees output block j (the
        # derivation in analysis/coupling.py); with fewer heads, blocks share a softmax.
        if side.num_heads == blocks:
            assert side.off_diagonal_max == 0.0
        else:
            assert side.off_diagonal_max == pytest.approx(off.max()) and off.max() > 0
        assert side.diagonal_mean == pytest.approx(np.diag(matrix).mean())
        assert len(side.head_gradient_norms["w_q"]) == side.num_heads


def test_the_document_is_json_and_matches_a_direct_measurement():
    setup = CompareRequest(
        d_model=8, heads=2, vs_heads=1, seq_len=3, batch=1, output_projection=True
    )
    doc = json.loads(json.dumps(coupling_comparison(setup).to_dict()))
    assert doc["setup"] == setup.to_dict() and doc["blocks"] == 2
    a, b, x = build(setup)
    for side, module in zip(doc["sides"], (a, b), strict=True):
        np.testing.assert_allclose(side["coupling"], gradient_coupling(module, x, blocks=2))


def test_talking_heads_with_grouped_kv_heads_is_refused_before_any_work():
    setup = CompareRequest(d_model=8, heads=4, kv_heads=2, vs_heads=2, output_projection=True)
    with pytest.raises(ValueError, match="talking_heads needs as many K/V heads as heads"):
        coupling_comparison(setup, talking_heads=0.5)
