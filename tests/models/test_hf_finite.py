"""``check_finite`` (models/hf/weights_match.py) reads each weight's sum, not a mask of its size:
it refuses exactly the models that ``torch.isfinite(p).all()`` over every parameter refuses,
naming the first such tensor and its count of bad values, also where finite values' sum
overflows (float16) or infinities of both signs cancel into NaN."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.models.hf.weights_match import check_finite

BAD = (float("nan"), float("inf"), float("-inf"))


def _model(*shapes: tuple[int, ...], dtype=torch.float32) -> torch.nn.Module:
    model = torch.nn.Module()
    generator = torch.Generator().manual_seed(3)
    for i, shape in enumerate(shapes):
        values = torch.randn(shape, generator=generator).to(dtype)
        model.register_parameter(f"w{i}", torch.nn.Parameter(values, requires_grad=False))
    return model


def _reference(model: torch.nn.Module) -> tuple[str, int] | None:
    """(name, count) of the first parameter with a non-finite value, by the full mask."""
    for name, p in model.named_parameters():
        bad = int((~torch.isfinite(p)).sum())
        if bad:
            return name, bad
    return None


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.float64]),
    injections=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 10_000), st.sampled_from(BAD)), max_size=4
    ),
)
def test_refuses_exactly_what_the_full_mask_refuses(dtype, injections) -> None:
    model = _model((7, 5), (13,), (3, 11, 2), dtype=dtype)
    params = list(model.parameters())
    with torch.no_grad():
        for which, where, value in injections:
            flat = params[which].view(-1)
            flat[where % flat.numel()] = value
    want = _reference(model)
    if want is None:
        check_finite(model, "tiny.safetensors")
        return
    name, count = want
    with pytest.raises(ValueError, match=rf"tiny.safetensors: tensor '{name}' holds {count:,} "):
        check_finite(model, "tiny.safetensors")


@pytest.mark.parametrize(("dtype", "value"), [(torch.float16, 6e4), (torch.float32, 3e38)])
def test_finite_values_whose_sum_overflows_pass(dtype, value) -> None:
    model = _model((4, 9), dtype=dtype)
    with torch.no_grad():
        model.w0.fill_(value)  # near the dtype's largest: a sum of 36 overflows in the dtype
    assert not torch.isfinite(model.w0.sum())
    check_finite(model, "big.safetensors")


def test_infinities_of_both_signs_are_refused() -> None:
    model = _model((5, 3), (7,))
    with torch.no_grad():
        model.w1[2], model.w1[5] = float("inf"), float("-inf")
    with pytest.raises(ValueError, match="tensor 'w1' holds 2 NaN or infinite values"):
        check_finite(model, "x")
