"""Two implementations that must agree: the packaged models through the production route
(headlab's registered attention inside transformers' LlamaForCausalLM and BertModel) and in
headlab's hand-built reference decoder and encoder give every statistic, role score and detector
score within 1e-4, on short texts and at length: SmolLM2 at 2048 tokens (one text), MiniLM at
512 (its limit).
Marker ``model``: each real model is loaded once per session (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from headlab.heads import head_statistics
from headlab.heads.long_context import long_text_statistics
from headlab.models.corpus import default_corpus, long_document

pytestmark = [pytest.mark.model, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def assert_grids_equal(got: dict, want: dict, what: str) -> None:
    assert set(got) == set(want), what
    for name, grid in want.items():
        torch.testing.assert_close(
            torch.tensor(got[name], dtype=torch.float64),
            torch.tensor(grid, dtype=torch.float64),
            atol=1e-4,
            rtol=1e-4,
            msg=f"{what}: {name}",
        )


def assert_long_equal(a, b) -> None:
    """Two ``long_text_statistics`` results: as many tokens (their strings are each tokenizer's
    own: the text under a token, or a word piece), the same statistics, received profiles and
    role scores."""
    assert len(a.tokens) == len(b.tokens) and a.special == b.special
    assert_grids_equal(a.statistics.metrics, b.statistics.metrics, "statistics")
    torch.testing.assert_close(a.received, b.received, atol=1e-4, rtol=1e-4)
    if a.roles is None:
        assert b.roles is None
        return
    for score in ("window_error", "copy_weight", "retrieval", "group_window_error"):
        mine, theirs = getattr(a.roles, score), getattr(b.roles, score)
        assert (mine is None) == (theirs is None), score
        if mine is not None:
            assert_grids_equal({score: mine}, {score: theirs}, "roles")
    assert a.roles.copy_positions == b.roles.copy_positions


def test_smollm2_statistics_and_detectors_agree_on_short_texts(
    smollm2_reference_decoder, smollm2
):
    texts = default_corpus(12)
    ours = head_statistics(smollm2, texts, max_length=64, detector_length=24)
    theirs = head_statistics(smollm2_reference_decoder, texts, max_length=64, detector_length=24)
    assert ours.first_token == theirs.first_token == "first"
    assert_grids_equal(ours.metrics, theirs.metrics, "statistics")
    assert_grids_equal(ours.detectors, theirs.detectors, "detectors")


def test_minilm_statistics_agree_on_short_texts(minilm_reference, minilm):
    texts = default_corpus(12)
    ours = head_statistics(minilm, texts, max_length=64)
    theirs = head_statistics(minilm_reference, texts, max_length=64)
    assert ours.first_token == theirs.first_token == "cls"
    assert "sep" in ours.metrics
    assert_grids_equal(ours.metrics, theirs.metrics, "statistics")


@pytest.mark.slow
def test_smollm2_long_text_statistics_and_roles_agree_at_2048_tokens(
    smollm2_reference_decoder, smollm2
):
    text = long_document()
    ours = long_text_statistics(smollm2, text, max_tokens=2048)
    theirs = long_text_statistics(smollm2_reference_decoder, text, max_tokens=2048)
    assert len(ours.tokens) == 2048
    assert_long_equal(ours, theirs)


@pytest.mark.slow
def test_minilm_long_text_statistics_agree_at_its_512_tokens(minilm_reference, minilm):
    text = long_document()
    ours = long_text_statistics(minilm, text)
    theirs = long_text_statistics(minilm_reference, text)
    assert len(ours.tokens) == 512 and ours.truncated
    assert_long_equal(ours, theirs)
