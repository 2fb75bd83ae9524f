"""The logits a block of positions at a time (``models.output_rows``) against whole logits.

For every causal tiny family (``hf_families``), the blocks equal headlab's own whole logits
(``run``), and their top-1 predictions and float64 cross-entropies equal those of transformers'
own eager model's logits. Families whose output head post-processes its logits (Gemma 2's final
soft-cap, Cohere's logit scale, Granite's logit scaling) are built here with a strong setting,
so that a route that skipped the post-processing would fail.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from hf_families import FAMILIES, TOKENS, VOCAB, padded

from headlab.models.hf import attach
from headlab.models.interface import TokenBatch
from headlab.models.output_rows import WholeOutput, next_token_scores, output_rows

DECODERS = [name for name, family in FAMILIES.items() if family.causal]


def _batch() -> TokenBatch:
    ids, mask = padded(seed=3)  # (3, 11): texts of 11, 7 and 2 tokens
    return TokenBatch(ids, mask.bool(), [[] for _ in range(3)])


def _scores_of(logits: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(top-1 (batch, pos - 1), cross-entropy (batch, pos - 1) float64) of whole logits."""
    head = logits[:, :-1].double()
    losses = torch.nn.functional.cross_entropy(
        head.flatten(0, 1), ids[:, 1:].flatten(), reduction="none"
    ).view(ids.shape[0], -1)
    return head.argmax(-1), losses


def _assert_rows_equal_whole(model, reference_logits: torch.Tensor, batch: TokenBatch) -> None:
    real = batch.attention_mask[:, 1:]  # (batch, pos - 1): a real next token
    with torch.no_grad():
        whole = model.run(batch)  # (batch, pos, vocab)
        rows = output_rows(model, batch)
        assert rows.num_positions == whole.shape[1]
        for start, stop in ((0, 3), (3, 8), (8, 11)):  # blocks of 3 and 5 and the rest
            got = rows.logits(slice(start, stop))
            torch.testing.assert_close(got, whole[:, start:stop], rtol=1e-5, atol=1e-5)
        for block in (2, 5, 64):
            top1, losses = next_token_scores(rows, batch.input_ids, rows=block)
            want_top1, want_losses = _scores_of(reference_logits, batch.input_ids)
            assert torch.equal(top1[real], want_top1[real])
            torch.testing.assert_close(losses[real], want_losses[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", DECODERS)
def test_rows_equal_eager_logits(name, hf_loaded, hf_eager):
    model = hf_loaded(name)
    batch = _batch()
    mask = batch.attention_mask.long()
    with torch.no_grad():
        eager = hf_eager(name)(input_ids=batch.input_ids, attention_mask=mask)
    _assert_rows_equal_whole(model, eager.logits, batch)


POST_PROCESSED = {
    "gemma2": {"final_logit_softcapping": 0.05, "attn_logit_softcapping": 1.5},
    "cohere": {"logit_scale": 3.7},
    "granite": {"logits_scaling": 0.23},
}


@pytest.mark.parametrize("model_type", list(POST_PROCESSED))
def test_rows_keep_the_family_post_processing(model_type):
    config = transformers.AutoConfig.for_model(
        model_type,
        vocab_size=VOCAB,
        hidden_size=40,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=10,
        intermediate_size=31,
        num_hidden_layers=2,
        max_position_embeddings=64,
        **TOKENS,
        **POST_PROCESSED[model_type],
    )
    torch.manual_seed(13)
    built = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    batch = _batch()
    mask = batch.attention_mask.long()
    with torch.no_grad():
        states = built.base_model(input_ids=batch.input_ids, attention_mask=mask).last_hidden_state
        raw = built.get_output_embeddings()(states)  # the head without its post-processing
        eager = built(input_ids=batch.input_ids, attention_mask=mask).logits
    real = batch.attention_mask
    assert (raw[real] - eager[real]).abs().max() > 0.01  # the post-processing matters here
    _assert_rows_equal_whole(attach(built), eager, batch)


def test_a_model_without_rows_gives_its_whole_output(hf_loaded):
    model = hf_loaded("llama")
    batch = _batch()
    with torch.no_grad():
        whole = model.run(batch)
    top1, losses = next_token_scores(WholeOutput(whole), batch.input_ids, rows=4)
    want_top1, want_losses = _scores_of(whole, batch.input_ids)
    assert torch.equal(top1, want_top1)
    torch.testing.assert_close(losses, want_losses)
    with pytest.raises(ValueError, match="expected ids of 11 positions, got 10"):
        next_token_scores(WholeOutput(whole), batch.input_ids[:, 1:])
