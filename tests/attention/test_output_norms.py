"""Contribution norms through the QR factors of W_O's head blocks, against the plain product."""

import torch

from headlab.attention.output_norms import contribution_norms, head_factors


def plain_norms(head_out, w_o):
    """||head_out_h @ W_h^T|| with the whole (embed_dim) product: the definition."""
    heads, d_head = head_out.shape[1], head_out.shape[-1]
    blocks = w_o.view(w_o.shape[0], heads, d_head)  # (embed, head, d_head)
    return torch.einsum("bhqd,ehd->bhqe", head_out, blocks).norm(dim=-1)


def test_factors_give_the_norms_of_the_whole_product():
    gen = torch.Generator().manual_seed(3)
    for embed, heads, d_head in ((13, 3, 5), (7, 2, 11)):  # embed > d_head, and below it
        w_o = torch.randn(embed, heads * d_head, generator=gen, dtype=torch.float64)
        head_out = torch.randn(2, heads, 17, d_head, generator=gen, dtype=torch.float64)
        head_out[0, 1, 4] = 0.0  # an ablated head's output: exactly zero
        got = contribution_norms(head_out, head_factors(w_o, heads))
        want = plain_norms(head_out, w_o)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        assert got[0, 1, 4] == 0.0


def test_a_weight_changed_in_place_is_factored_again():
    gen = torch.Generator().manual_seed(5)
    w_o = torch.randn(11, 2 * 3, generator=gen, dtype=torch.float64)
    head_out = torch.randn(1, 2, 7, 3, generator=gen, dtype=torch.float64)
    first = head_factors(w_o, 2)
    assert head_factors(w_o, 2) is first  # kept while the weight is unchanged
    w_o.mul_(2.0)
    got = contribution_norms(head_out, head_factors(w_o, 2))
    torch.testing.assert_close(got, plain_norms(head_out, w_o), rtol=1e-12, atol=1e-12)
