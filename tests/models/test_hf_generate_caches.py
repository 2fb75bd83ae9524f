"""``generate`` through headlab gives SDPA's tokens with every cache kind transformers offers.

With a compileable cache (static, or static with sliding layers where the model has a window),
``generate`` builds the mask in advance through the mask interface and hands the model headlab's
``LazyMask``; Llama-style models then pass it to ``create_causal_mask`` again, which must take it
as the prepared mask it is. Each family's small random model (built by transformers, left-padded
batch so that the padding reaches the mask) generates greedily with ``attn_implementation``
"sdpa" (eager for Gemma 2 and gpt-oss, which have no SDPA) and "headlab": the tokens must be
equal and every step's scores equal to 1e-5.
"""

from __future__ import annotations

import pytest
import torch
from hf_families import VOCAB, build, config

from headlab.models.hf.registry import register

NEW_TOKENS = 6
#: the families whose ``test_generate_with_static_cache`` failed in transformers' own suite, and
#: families that take a dict of masks per layer type (Gemma 2, gpt-oss)
FAMILIES = [
    "llama",
    "mistral",
    "mistral-no-window",
    "gpt2",
    "gpt_neox",
    "olmo2",
    "phi3",
    "stablelm",
    "gemma2",
    "gpt_oss",
]
WINDOWED = {"mistral", "gemma2", "gpt_oss"}
#: the reference implementation: SDPA, or eager where transformers has no SDPA for the family
REFERENCE = {"gemma2": "eager", "gpt_oss": "eager"}
CUDA = torch.cuda.is_available()
#: kind -> generate's keywords; offloading moves the cache between an accelerator and the CPU
KINDS = {
    "dynamic": {},
    "static": {"cache_implementation": "static"},
    "offloaded": {"cache_implementation": "offloaded"},
    "offloaded_static": {"cache_implementation": "offloaded_static"},
    "quantized": {"cache_implementation": "quantized", "cache_config": {"backend": "fp8"}},
}


def _model(name: str):
    from transformers import AutoModelForCausalLM

    if name != "mistral-no-window":
        return build(name)
    torch.manual_seed(5)
    windowless = config("mistral")
    windowless.sliding_window = None
    return AutoModelForCausalLM.from_config(windowless, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def models():
    register()
    cache: dict = {}

    def get(name):
        if name not in cache:
            cache[name] = _model(name)
        return cache[name]

    return get


def _generate(model, implementation: str, kind: str):
    model.set_attn_implementation(implementation)
    generator = torch.Generator().manual_seed(11)
    ids = torch.randint(3, VOCAB, (2, 7), generator=generator)
    padding = torch.ones_like(ids)
    padding[1, :3] = 0  # left padding, as for batched generation
    device = "cuda" if kind.startswith("offloaded") else "cpu"
    with torch.no_grad():
        return model.to(device).generate(
            ids.to(device),
            attention_mask=padding.to(device),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            return_dict_in_generate=True,
            output_scores=True,
            **KINDS[kind],
        )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", FAMILIES)
def test_generate_gives_sdpas_tokens_with_every_cache_kind(name, kind, models):
    reference = REFERENCE.get(name, "sdpa")
    if kind.startswith("offloaded") and not CUDA:
        pytest.skip("an offloaded cache moves layers between an accelerator and the CPU")
    if kind == "quantized" and name in WINDOWED:
        pytest.skip("transformers' QuantizedCache holds full attention layers only")
    model = models(name)
    try:
        expected = _generate(model, reference, kind)
        got = _generate(model, "headlab", kind)
    finally:
        model.to("cpu").set_attn_implementation(reference)
    assert got.sequences.tolist() == expected.sequences.tolist()
    for ours, theirs in zip(got.scores, expected.scores, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    if kind == "static" and name in WINDOWED:  # the static cache keeps only the window
        assert any(got.cache.is_sliding)


def test_a_prepared_mask_is_returned_as_it_is_when_it_describes_the_call():
    from headlab.models.hf.lazy_mask import headlab_mask

    prepared = headlab_mask(batch_size=2, q_length=3, kv_length=11, q_offset=5)
    assert (prepared.ndim, prepared.shape) == (4, (2, 1, 3, 11))
    again = headlab_mask(
        batch_size=2, q_length=3, kv_length=11, q_offset=5, attention_mask=prepared
    )
    assert again is prepared
    with pytest.raises(
        ValueError,
        match=r"describes .* = \(2, 3, 11, 5, 0\), the model's call "
        r"\(2, 1, 11, 5, 0\)",
    ):
        headlab_mask(batch_size=2, q_length=1, kv_length=11, q_offset=5, attention_mask=prepared)


@pytest.mark.parametrize("name", ["llama", "gpt_neox"])
def test_generate_from_embeddings_with_a_static_cache_gives_sdpas_tokens(name, models):
    """As transformers' ``test_generate_from_inputs_embeds_with_static_cache``: the prompt as
    embeddings, the mask prepared in advance from them."""
    model = models(name)
    ids = torch.randint(3, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
    embeds = model.get_input_embeddings()(ids).detach()
    outputs = {}
    try:
        for implementation in ("sdpa", "headlab"):
            model.set_attn_implementation(implementation)
            with torch.no_grad():
                outputs[implementation] = model.generate(
                    inputs_embeds=embeds,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=NEW_TOKENS,
                    min_new_tokens=NEW_TOKENS,
                    do_sample=False,
                    cache_implementation="static",
                    return_dict_in_generate=True,
                    output_scores=True,
                )
    finally:
        model.set_attn_implementation("sdpa")
    assert outputs["headlab"].sequences.tolist() == outputs["sdpa"].sequences.tolist()
    for ours, theirs in zip(outputs["headlab"].scores, outputs["sdpa"].scores, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
