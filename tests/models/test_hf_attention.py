"""headlab's registered attention inside every family: the same numbers as transformers' eager
attention, greedy generation with the model's own cache, and transformers' registry untouched."""

from __future__ import annotations

import pytest
import torch
from hf_families import FAMILIES, padded, text

from headlab.models.hf.registry import NAME, register

DECODERS = [name for name, family in FAMILIES.items() if family.causal]


def _outputs(model, ids, mask, **kwargs):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, **kwargs)
    return out, out.logits if hasattr(out, "logits") else out.last_hidden_state


@pytest.mark.parametrize("name", FAMILIES)
def test_outputs_equal_eager_on_a_right_padded_batch(name, hf_loaded, hf_eager):
    ids, mask = padded()
    _, expected = _outputs(hf_eager(name), ids, mask)
    _, got = _outputs(hf_loaded(name).model, ids, mask)
    real = mask.bool()  # padded positions are garbage in both, and differently so
    torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", FAMILIES)
def test_weights_equal_eager_when_asked(name, hf_loaded, hf_eager):
    ids, mask = padded(1)
    expected, _ = _outputs(hf_eager(name), ids, mask, output_attentions=True)
    got, _ = _outputs(hf_loaded(name).model, ids, mask, output_attentions=True)
    if name == "gpt2":  # GPT2Attention keeps output_attentions to itself: the function never
        assert all(w is None for w in got.attentions)  # hears that weights were asked for
        return
    real = mask.bool()[:, None, :, None]  # (batch, 1, q_pos, 1): rows of real queries
    for weights, reference in zip(got.attentions, expected.attentions, strict=True):
        assert weights.shape == reference.shape  # (batch, head, q_pos, k_pos)
        torch.testing.assert_close(
            weights * real, reference * real, atol=1e-6, rtol=1e-5, check_dtype=True
        )


@pytest.mark.parametrize("name", DECODERS)
def test_greedy_generation_with_the_cache_equals_transformers(name, hf_loaded, hf_eager):
    model = hf_loaded(name)
    prompt = text(6, 3)  # 6 + 10 tokens: past every sliding window
    ids = torch.tensor([model.encode(prompt)])
    with torch.no_grad():
        expected = hf_eager(name).generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False
        )
    counted = []
    new = model.generate(prompt, 10, on_token=counted.append)
    assert new == expected[0, ids.shape[1] :].tolist()
    assert counted == list(range(1, len(new) + 1))


def test_a_model_loaded_elsewhere_still_runs_sdpa(hf_dirs, hf_loaded, monkeypatch):
    """headlab adds its two entries and nothing else; a model loaded the usual way next to a
    headlab one runs transformers' SDPA, never headlab's function."""
    import transformers
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

    import headlab.models.hf.attention_function as attention

    hf_loaded("llama")
    assert register() == NAME  # a second registration changes nothing
    assert AttentionInterface._global_mapping["sdpa"] is sdpa_attention_forward
    assert AttentionMaskInterface._global_mapping["sdpa"] is sdpa_mask
    assert AttentionMaskInterface._global_mapping["eager"] is eager_mask
    assert transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS._local_mapping == {}
    plain = transformers.AutoModelForCausalLM.from_pretrained(hf_dirs["llama"]).eval()
    assert plain.config._attn_implementation == "sdpa"
    calls = {"sdpa": 0, "headlab": 0}
    real_sdpa, real_attend = torch.nn.functional.scaled_dot_product_attention, attention.attend

    def sdpa(*args, **kwargs):
        calls["sdpa"] += 1
        return real_sdpa(*args, **kwargs)

    def attend(*args, **kwargs):
        calls["headlab"] += 1
        return real_attend(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", sdpa)
    monkeypatch.setattr(attention, "attend", attend)
    ids, mask = padded()
    _outputs(plain, ids, mask)
    assert calls == {"sdpa": plain.config.num_hidden_layers, "headlab": 0}
    _outputs(hf_loaded("llama").model, ids, mask)
    assert calls["headlab"] == plain.config.num_hidden_layers


def test_a_foreign_function_under_headlabs_name_is_refused(monkeypatch):
    from transformers import AttentionInterface

    monkeypatch.setitem(AttentionInterface._global_mapping, NAME, lambda *a, **k: None)
    with pytest.raises(RuntimeError, match=r"already holds 'headlab'.*refusing to replace it"):
        register()


@pytest.mark.parametrize("name", ["llama", "gemma2", "gpt_oss", "gpt_neox", "bert"])
def test_bfloat16_is_within_its_precision_of_float32(name, hf_dirs, hf_loaded, hf_eager):
    """headlab in bfloat16 is as close to float32 as transformers' own bfloat16 run is
    (within twice its error, or bfloat16's resolution of the outputs' scale)."""
    from hf_families import model_class

    from headlab.models.hf import load_transformers

    ids, mask = padded(2)
    real = mask.bool()
    _, exact = _outputs(hf_eager(name), ids, mask)
    _, half = _outputs(load_transformers(hf_dirs[name], dtype=torch.bfloat16).model, ids, mask)
    reference = model_class(FAMILIES[name]).from_pretrained(
        hf_dirs[name], attn_implementation="eager", dtype=torch.bfloat16
    )
    _, theirs = _outputs(reference.eval(), ids, mask)
    assert half.dtype == torch.bfloat16
    ours = (half.float() - exact)[real].abs().max().item()
    transformers_error = (theirs.float() - exact)[real].abs().max().item()
    resolution = 2**-7 * exact[real].abs().max().item()
    assert ours <= max(2 * transformers_error, resolution), (ours, transformers_error)
