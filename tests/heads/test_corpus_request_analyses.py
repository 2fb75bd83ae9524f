"""The analyses over many texts take a CorpusRequest in place of their texts: the same result as
the texts it reads at the length it fits to the model, and its bounds refused before it runs."""

from __future__ import annotations

import random

import pytest
import torch

from headlab.heads import collapse_heads, head_importance, head_statistics
from headlab.heads.ablation import ablation_effect
from headlab.heads.requests import CorpusRequest

WORDS = [f"t{i}" for i in range(1, 97)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(7)
    lines = [" ".join(rng.choices(WORDS, k=rng.randint(9, 23))) for _ in range(11)]
    path = tmp_path_factory.mktemp("corpus") / "texts.txt"
    path.write_text("\n".join(lines) + "\n")
    return path, lines


ANALYSES = {
    "statistics": lambda m, t, **kw: head_statistics(m, t, detector_length=0, **kw).to_dict(),
    "collapse": lambda m, t, **kw: collapse_heads(m, t, (2,), **kw).to_dict(),
    "importance": lambda m, t, **kw: head_importance(m, t, **kw).to_dict(),
    "ablation": lambda m, t, **kw: ablation_effect(m, t, [(1, 2)], **kw).to_dict(),
}


@pytest.mark.parametrize("name", list(ANALYSES))
def test_a_request_gives_what_its_texts_give(tiny_llama, corpus, name):
    path, lines = corpus
    analysis = ANALYSES[name]
    torch.manual_seed(0)
    requested = analysis(tiny_llama, CorpusRequest(n_texts=7, max_length=13, corpus=path))
    torch.manual_seed(0)
    listed = analysis(tiny_llama, lines[:7], max_length=13)
    assert requested == listed
    torch.manual_seed(0)
    cut = analysis(tiny_llama, lines[:7], max_length=11)
    assert cut != listed  # the length reached the analysis: 13 and 11 tokens differ


def test_a_request_asks_no_more_than_the_models_positions(tiny_llama, corpus):
    request = CorpusRequest(n_texts=3, max_length=65, corpus=corpus[0])  # the model has 64
    with pytest.raises(ValueError, match="max_length must be between 2 and 64, got 65"):
        head_statistics(tiny_llama, request)


def test_a_request_and_a_length_beside_it_are_refused(tiny_llama, corpus):
    with pytest.raises(ValueError, match="max_length is the request's own"):
        collapse_heads(tiny_llama, CorpusRequest(n_texts=3, corpus=corpus[0]), max_length=9)
