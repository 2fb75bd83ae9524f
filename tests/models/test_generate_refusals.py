"""Both decoders, headlab's own and the transformers route, refuse a generation request that
cannot fit in the same words, before generating anything."""

import re

import pytest


@pytest.fixture(params=["headlab", "transformers"])
def decoder(request, tiny_llama, hf_loaded):
    return tiny_llama if request.param == "headlab" else hf_loaded("llama")


def test_an_empty_prompt_is_refused(decoder):
    with pytest.raises(ValueError, match="the prompt must have at least one token"):
        decoder.generate("", max_new_tokens=2)


def test_a_prompt_and_its_new_tokens_must_fit_the_positions(decoder):
    prompt = len(decoder.encode("t1 t2 t3"))
    new = decoder.max_positions - prompt + 1
    expected = (
        f"prompt ({prompt} tokens) + max_new_tokens ({new}) exceeds the model's "
        f"{decoder.max_positions} positions"
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        decoder.generate("t1 t2 t3", max_new_tokens=new)


def test_max_new_tokens_below_one_is_refused(decoder):
    with pytest.raises(ValueError, match="max_new_tokens"):
        decoder.generate("t1", max_new_tokens=0)
