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


@pytest.mark.parametrize("name", ["llama", "gemma2"])
@pytest.mark.parametrize("block", [1, 3, 10])
def test_objective_by_blocks_equals_the_whole_loss_and_its_gradient(name, block, hf_loaded):
    """The objective a block of positions at a time (logits made again in the backward)
    against float64 cross-entropy of the whole logits (``run``) under the same head mask,
    value and gradient at the head mask (autograd of the whole); padding ignored."""
    from headlab.models.hf.block_logits import next_token_loss

    model = hf_loaded(name)
    batch = _batch()
    generator = torch.Generator().manual_seed(7)
    shape = (model.num_layers, model.heads_per_layer[0])
    xi = (0.5 + torch.rand(shape, generator=generator, dtype=torch.float64)).float()
    xi_whole, xi_rows = xi.clone().requires_grad_(), xi.clone().requires_grad_()
    logits = model.run(batch, list(xi_whole)).double()  # (batch, pos, vocab), whole
    targets = batch.input_ids[:, 1:].masked_fill(~batch.attention_mask[:, 1:], -100)
    want = torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), targets.flatten(), ignore_index=-100
    )
    (want_grad,) = torch.autograd.grad(want, xi_whole)
    got = next_token_loss(model.run_rows(batch, list(xi_rows)), batch, block)
    (got_grad,) = torch.autograd.grad(got, xi_rows)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-5)
    torch.testing.assert_close(got_grad.double(), want_grad.double(), rtol=1e-4, atol=1e-6)
    assert float(want_grad.abs().max()) > 1e-4
