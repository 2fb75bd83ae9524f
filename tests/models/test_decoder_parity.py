"""headlab's SmolLM2 against transformers' LlamaForCausalLM on the same GGUF (eager attention)."""

from __future__ import annotations

import pytest
import torch

from headlab.models import HeadModel

pytestmark = [pytest.mark.model, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

LONG = " ".join(
    f"Line {i}: the quick brown fox jumps over the lazy dog while the cat sleeps."
    for i in range(40)
)
PROMPTS = {
    "short": "The capital of France is",
    "long": LONG,  # 500+ tokens
    "code": "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "non-ascii": "Café, naïve façade — 日本語のテキスト 🙂 and Ελληνικά",
}
TEXTS = [
    "plain ASCII text, with punctuation!",
    "def f(x):\n\treturn x ** 2  # code\n",
    "whitespace    runs\n\n\n  and   tabs\t\t.",
    "accents: éàüõ ñ ç",
    "CJK: 漢字かなカナ 한국어",
    "emoji: 🙂🚀👩‍👩‍👧 and numbers 1234567",
    "<|im_start|>user\nhello<|im_end|>",
]


def test_the_decoder_is_a_head_model(smollm2):
    assert isinstance(smollm2, HeadModel)
    assert smollm2.heads_per_layer == [9] * 30 and smollm2.kv_heads_per_layer == [3] * 30
    assert smollm2.causal and smollm2.max_positions == 8192


@pytest.mark.parametrize("text", TEXTS)
def test_token_ids_equal_transformers_gguf_tokenizer(smollm2, smollm2_reference, text):
    _, tokenizer = smollm2_reference
    assert smollm2.encode(text) == tokenizer(text)["input_ids"]


@pytest.mark.parametrize("text", TEXTS)
def test_token_strings_are_the_text_under_each_token(smollm2, smollm2_reference, text):
    """What figures and tables show: the user's characters, not byte-level pieces ("Ġcat")."""
    _, tokenizer = smollm2_reference
    tokens = smollm2.tokenize([text]).tokens[0]
    pieces = tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
    assert len(tokens) == len(pieces)
    # Each token's string decodes from its own id (a character split over tokens aside).
    for token, piece in zip(tokens, pieces, strict=True):
        if "\ufffd" not in tokenizer.convert_tokens_to_string([piece]):
            assert token == tokenizer.convert_tokens_to_string([piece])
    if text.isascii():
        assert "".join(tokens) == text


@pytest.mark.parametrize("name", list(PROMPTS))
def test_logits_equal_transformers(smollm2, smollm2_reference, name):
    model, _ = smollm2_reference
    ids = torch.tensor([smollm2.encode(PROMPTS[name])])
    if name == "long":
        assert ids.shape[1] > 500
    with torch.no_grad():
        expected = model(ids).logits
    ours = smollm2.logits(ids)
    span = float(expected.max() - expected.min())
    assert float((ours - expected).abs().max()) <= 1e-3 * span


def test_every_layers_attention_weights_equal_transformers(smollm2, smollm2_reference):
    model, _ = smollm2_reference
    batch = smollm2.tokenize([PROMPTS["code"]])
    with torch.no_grad():
        expected = model(batch.input_ids, output_attentions=True).attentions
        _, traces = smollm2.trace_batch(batch)
    assert len(traces) == len(expected) == 30
    for ours, theirs in zip(traces, expected, strict=True):
        assert ours.weights.shape == theirs.shape == (1, 9, *batch.input_ids.shape[1:] * 2)
        torch.testing.assert_close(ours.weights, theirs, atol=1e-4, rtol=0)


def test_padded_batches_give_each_texts_own_logits(smollm2):
    texts = [PROMPTS["short"], PROMPTS["code"]]
    batch = smollm2.tokenize(texts)
    together = smollm2.logits(batch.input_ids, batch.attention_mask)
    for row, text in enumerate(texts):
        alone = smollm2.logits(torch.tensor([smollm2.encode(text)]))
        n = alone.shape[1]
        torch.testing.assert_close(together[row, :n], alone[0], atol=2e-4, rtol=1e-4)


def test_greedy_generation_of_32_tokens_equals_transformers(smollm2, smollm2_reference):
    model, _ = smollm2_reference
    prompt = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    ids = torch.tensor([smollm2.encode(prompt)])
    with torch.no_grad():
        expected = model.generate(
            ids, max_new_tokens=32, do_sample=False, eos_token_id=None, pad_token_id=2
        )[0, ids.shape[1] :].tolist()
    ours = smollm2.generate(prompt, 32)
    assert ours == expected[: len(ours)] and len(ours) in (32, expected.index(2) + 1)
