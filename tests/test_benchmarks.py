"""The attention benchmark's guards: what it times is the computation it names."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
bench_attention = pytest.importorskip("bench_attention")


def test_kernel_floor_computes_the_fast_paths_weight_gradients():
    # Distinct sizes (batch 3, pos 7, 5 heads of 4) so that a swapped axis fails.
    torch.manual_seed(3)
    size = bench_attention.Size("t", 3, 7, 20, 5)
    module = bench_attention.build_modules(size)["headlab"]
    x, g = torch.randn(3, 7, 20), torch.randn(3, 7, 20)
    d_w_in, d_w_o = bench_attention.kernel_floor_step(module, x, g)()
    module.train().zero_grad(set_to_none=True)
    (module(x, x, x, need_weights=False)[0] * g).sum().backward()
    torch.testing.assert_close(d_w_in, module.in_proj_weight.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d_w_o, module.out_proj.weight.grad, rtol=1e-5, atol=1e-5)


def test_kernel_floor_guard_refuses_a_different_computation():
    torch.manual_seed(3)
    module = bench_attention.build_modules(bench_attention.Size("t", 2, 5, 12, 3))["headlab"]
    x, g = torch.randn(2, 5, 12), torch.randn(2, 5, 12)

    def wrong_step():
        return torch.zeros(36, 12), torch.zeros(12, 12)

    with pytest.raises(RuntimeError, match="kernel floor disagrees"):
        bench_attention.check_floor(module, x, g, wrong_step)


def test_the_statistics_floor_times_exact_causal_attention():
    # the floor's chunked product is the attention SDPA computes (3 K/V heads serve 6 query
    # heads; 13 positions in chunks of 2 rows, so that the chunks' causal masks differ)
    floor = pytest.importorskip("statistics_floor")
    torch.manual_seed(5)
    q = torch.randn(1, 6, 13, 4, dtype=torch.float64)
    k, v = (torch.randn(1, 3, 13, 4, dtype=torch.float64) for _ in range(2))
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True
    )
    torch.testing.assert_close(floor.weights_only(q, k, v, chunk_elements=6 * 13 * 2), expected)
