"""Parity of the production route (``load("minilm")``) with the outside implementations on the
packaged all-MiniLM-L6-v2.

Embeddings against sentence-transformers' own pipeline; every layer's per-head attention weights
against transformers' BertModel (eager attention, output_attentions=True).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.model

LONG = " ".join(
    f"Sentence {i} of a long document, with a clause (and a parenthesis); then more words."
    for i in range(60)
)  # far beyond 512 tokens
TEXTS = [
    "Hi",
    "The quick brown fox jumps over the lazy dog.",
    "What?! Wait... really -- yes: [brackets], {braces}, <angles> & 100% #tags @you.",
    "Ünïcödé text: naïve café, Größe, 日本語のテキスト, emoji 🙂, Ελληνικά, русский.",
    "   leading and trailing spaces   ",
    "Repeated repeated repeated repeated words words words.",
    LONG,
]


@pytest.fixture(scope="module")
def sentence_transformer():
    from sentence_transformers import SentenceTransformer

    from headlab.models import default_model_dir

    return SentenceTransformer(str(default_model_dir()), device="cpu")


@pytest.fixture(scope="module")
def bert():
    from transformers import AutoModel

    from headlab.models import default_model_dir

    return AutoModel.from_pretrained(str(default_model_dir()), attn_implementation="eager").eval()


def _check_embeddings(ours, theirs):
    assert ours.shape == theirs.shape
    assert F.cosine_similarity(ours, theirs, dim=1).min().item() >= 0.99999
    assert (ours - theirs).abs().max().item() <= 1e-4


def embed(model, texts: list[str], max_length: int | None = None) -> torch.Tensor:
    """(n_texts, d_model) sentence embeddings of the route, four texts per batch."""
    return model.embed(texts, 4, max_length=max_length)


def test_embeddings_equal_sentence_transformers(minilm, sentence_transformer):
    assert minilm.pooling.max_seq_length == sentence_transformer.max_seq_length == 256
    theirs = sentence_transformer.encode(TEXTS, batch_size=4, convert_to_tensor=True)
    _check_embeddings(embed(minilm, TEXTS), theirs.cpu())


def test_embeddings_equal_at_512_tokens(minilm, sentence_transformer):
    old = sentence_transformer.max_seq_length
    sentence_transformer.max_seq_length = 512
    try:
        theirs = sentence_transformer.encode([LONG, TEXTS[3]], convert_to_tensor=True)
    finally:
        sentence_transformer.max_seq_length = old
    assert minilm.tokenize([LONG], 512).input_ids.shape == (1, 512)
    _check_embeddings(embed(minilm, [LONG, TEXTS[3]], max_length=512), theirs.cpu())


@pytest.mark.parametrize("text", [TEXTS[2], TEXTS[3], LONG])
def test_attention_weights_equal_transformers(minilm, bert, text):
    batch = minilm.tokenize([text], 512)
    _, traces = minilm.trace_batch(batch)
    with torch.no_grad():
        out = bert(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask.long(),
            output_attentions=True,
        )
    n = len(batch.tokens[0])
    assert len(out.attentions) == len(traces) == 6
    for ours, theirs in zip(traces, out.attentions, strict=True):
        assert ours.weights.shape == theirs.shape == (1, 12, n, n)
        torch.testing.assert_close(ours.weights, theirs, rtol=0, atol=2e-5)
    assert traces[-1].output.shape == (1, n, 384)
