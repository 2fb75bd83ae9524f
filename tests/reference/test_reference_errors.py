"""Bad shapes, dtypes and head counts raise a ValueError naming the expected and received value."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from torch_bridge import CONFIGS, make_inputs, make_module, params_from_module

from headlab.reference import (
    MultiHeadParams,
    attention,
    multi_head_attention,
    multi_head_attention_backward,
    softmax,
)

CFG = CONFIGS["gqa"]  # E=12, H=6, G=2, D=5, batch 2, q_pos 5, k_pos 7


@pytest.fixture(scope="module")
def setup():
    params = params_from_module(make_module(CFG))
    xs = [x.numpy() for x in make_inputs(CFG)]
    return params, xs


def test_attention_shape_and_mask_errors() -> None:
    q, k = np.zeros((2, 5, 3)), np.zeros((2, 7, 3))
    with pytest.raises(ValueError, match=r"share d_head.*\(2, 7, 4\)"):
        attention(q, np.zeros((2, 7, 4)), k)
    with pytest.raises(ValueError, match=r"share k_pos.*\(2, 6, 3\)"):
        attention(q, k, np.zeros((2, 6, 3)))
    with pytest.raises(ValueError, match=r"\(2, 5, 7\), got shape \(7, 5\)"):
        attention(q, k, k, np.zeros((7, 5), dtype=bool))
    with pytest.raises(ValueError, match=r"\(2, 5, 7\), got shape \(3, 5, 7\)"):
        attention(q, k, k, np.zeros((3, 5, 7), dtype=bool))  # would enlarge the scores
    with pytest.raises(ValueError, match="bool or floating point, got dtype int64"):
        attention(q, k, k, np.zeros((5, 7), dtype=np.int64))
    with pytest.raises(ValueError, match="floating point array, got dtype int64"):
        softmax(np.zeros(3, dtype=np.int64))


def test_parameter_errors(setup) -> None:
    params, _ = setup
    with pytest.raises(ValueError, match=r"num_kv_heads must be .* dividing num_heads=6, got 4"):
        dataclasses.replace(params, num_kv_heads=4)
    with pytest.raises(ValueError, match=r"w_k must have shape \(num_kv_heads \* head_dim, kdim\)"):
        dataclasses.replace(params, w_k=params.w_k[:-1])
    with pytest.raises(ValueError, match=r"w_o must have shape .*\(12, 30\), got \(12, 29\)"):
        dataclasses.replace(params, w_o=params.w_o[:, :-1])
    with pytest.raises(ValueError, match=r"b_v must have shape \(10,\), got \(11,\)"):
        dataclasses.replace(params, b_v=np.zeros(11))
    with pytest.raises(ValueError, match="w_q rows must be num_heads \\* head_dim"):
        MultiHeadParams(
            w_q=np.zeros((31, 12)), w_k=params.w_k, w_v=params.w_v, w_o=params.w_o, num_heads=6
        )
    with pytest.raises(ValueError, match="b_o dtype must be float64 like w_q, got float32"):
        dataclasses.replace(params, b_o=params.b_o.astype(np.float32))


def test_call_errors(setup) -> None:
    params, (x_q, x_k, x_v) = setup
    with pytest.raises(
        ValueError, match=r"x_k must have shape \(batch, pos, 12\), got \(2, 7, 11\)"
    ):
        multi_head_attention(x_q, x_k[..., :11], x_v, params)
    with pytest.raises(ValueError, match="x_k, x_v must share k_pos"):
        multi_head_attention(x_q, x_k, x_v[:, :6], params)
    with pytest.raises(ValueError, match=r"head_mask must have shape .*\(6,\).*got \(5,\)"):
        multi_head_attention(x_q, x_k, x_v, params, head_mask=np.ones(5))
    out, cache = multi_head_attention(x_q, x_k, x_v, params)
    expected = r"d_out must have shape \(batch, q_pos, d_model\)=\(2, 5, 12\)"
    with pytest.raises(ValueError, match=expected):
        multi_head_attention_backward(out[:, :4], cache)
