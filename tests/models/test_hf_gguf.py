"""A GGUF through transformers on headlab's attention: the packaged SmolLM2-135M-Instruct gives
transformers' own eager logits and greedy continuation (marker ``model``: loads 135M weights)."""

from __future__ import annotations

import pytest
import torch

from headlab.models.hf import TransformersModel

pytestmark = [pytest.mark.model, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def test_the_packaged_gguf_loads_through_transformers(smollm2, smollm2_reference):
    model = smollm2
    assert isinstance(model, TransformersModel) and model.name == "SmolLM2-135M-Instruct"
    assert (model.num_layers, model.heads_per_layer[0], model.kv_heads_per_layer[0]) == (30, 9, 3)
    reference, tokenizer = smollm2_reference
    texts = ["The capital of France is", "def add(a, b):\n    return"]
    batch = model.tokenize(texts)
    assert (
        batch.input_ids[0, : batch.attention_mask[0].sum()].tolist()
        == tokenizer(texts[0])["input_ids"]
    )
    with torch.no_grad():
        expected = reference(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask.long()
        ).logits
    real = batch.attention_mask
    torch.testing.assert_close(model.run(batch)[real], expected[real], atol=1e-4, rtol=1e-4)


def test_greedy_generation_equals_transformers(smollm2, smollm2_reference):
    reference, tokenizer = smollm2_reference
    prompt = "The capital of France is"
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    with torch.no_grad():
        expected = reference.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False
        )
    assert smollm2.generate(prompt, 8) == expected[0, ids.shape[1] :].tolist()
