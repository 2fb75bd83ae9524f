"""The sweep's TinyTransformer copied into transformers' own GPT-2 (eager attention) computes the
same logits, in float64, at distinct sizes (d_model 21, above the 16 classes so that the
readout's bias can move into ln_f; heads of 21, 7 or 3; MLP 42), with weights redrawn away from
the init (biases, LayerNorm scales and the readout's bias included); what the map does not cover
is refused in one line."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from headlab.experiments.run_sizing import make_config
from headlab.experiments.sweep_gpt2 import as_transformers, gpt2_like
from headlab.experiments.sweep_tasks import generate
from headlab.experiments.tiny_transformer import TinyTransformer


def _tiny(heads: int, seed: int, **sizes) -> TinyTransformer:
    config = make_config("induction", heads, d_model=21, layers=2, seed=seed, **sizes)
    torch.manual_seed(seed)
    tiny = TinyTransformer(config).double().eval()
    with torch.no_grad():
        for parameter in tiny.parameters():
            parameter.normal_(0.2, 0.7)
    return tiny


@settings(max_examples=6, deadline=None)
@given(heads=st.sampled_from([1, 3, 7]), seed=st.integers(0, 2**16))
def test_gpt2_computes_the_sweep_models_logits(heads, seed):
    tiny = _tiny(heads, seed)
    batch = generate("induction", 7, seed)
    with torch.no_grad():
        expected = tiny(batch.tokens)[0][:, 0]  # (batch, class)
        got = gpt2_like(tiny)(input_ids=batch.tokens[..., 0]).logits[:, -1]
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


def test_attached_copy_runs_headlabs_attention_and_leaves_the_sweep_model():
    tiny = _tiny(3, 5)
    before = {k: v.clone() for k, v in tiny.state_dict().items()}
    batch = generate("induction", 4, 1)
    model = as_transformers(tiny)
    assert model.heads_per_layer == [3, 3]
    with torch.no_grad():
        got = model.model(input_ids=batch.tokens[..., 0]).logits[:, -1]
        expected = tiny(batch.tokens)[0][:, 0]
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
    for key, value in tiny.state_dict().items():
        assert torch.equal(value, before[key])


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (make_config("induction", 4, d_model=16, layers=2, num_kv_heads=2), "without GQA"),
        (make_config("induction", 4, d_model=16, layers=2, head_dim=2), "fill d_model"),
        (
            make_config("induction", 2, d_model=16, layers=2, attention="talking-heads"),
            "TalkingHeadsAttention",
        ),
        (make_config("recall", 2, d_model=16, layers=2), "recall"),
        (make_config("induction", 3, d_model=15, layers=2), "full row rank 16"),
    ],
)
def test_unmappable_models_are_refused(config, message):
    with pytest.raises(ValueError, match=message) as error:
        gpt2_like(TinyTransformer(config))
    assert "\n" not in str(error.value)
