"""One long text through a whole model: streaming statistics against the materialised traces.

Tiny random models (a BERT with padding, a Llama with RoPE, causal masking and GQA) here; the
packaged SmolLM2 and MiniLM at longer lengths in the model-marked tests at the end.
"""

from __future__ import annotations

import pytest
import torch

from headlab.heads.long_context import (
    SINK_THRESHOLD,
    TOP_KEYS_KEPT,
    heavy_hitters,
    long_context_findings,
    long_text_statistics,
)
from headlab.heads.statistics import head_statistics


def traced_means(model, batch):
    """name -> (layer, head) means over real queries, from the full weights of trace_batch."""
    _, traces = model.trace_batch(batch)
    real = batch.attention_mask
    special = model.special_positions(batch)
    out: dict[str, list[list[float]]] = {}
    received = []
    for t in traces:
        w = t.weights.double()[0]  # (head, q_pos, k_pos), one text
        n = w.shape[-1]
        offsets = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs().double()
        per_query = {
            "entropy": -(w * w.clamp_min(1e-30).log()).sum(-1),
            "max_weight": w.amax(-1),
            "self": w.diagonal(dim1=-2, dim2=-1),
            "distance": (w * offsets).sum(-1),
            "contribution_norm": t.contributions.double()[0].norm(dim=-1),
            **{name: w[:, :, int(index[0])] for name, index in special.items()},
        }
        for name, value in per_query.items():
            out.setdefault(name, []).append(value[:, real[0]].mean(-1).tolist())
        out.setdefault("prev", []).append(w.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1).tolist())
        received.append(w.sum(1))  # (head, k_pos)
    return out, torch.stack(received)


def assert_means_equal(result, expected) -> None:
    for name, grid in expected.items():
        torch.testing.assert_close(
            torch.tensor(result.statistics.metrics[name]),
            torch.tensor(grid),
            atol=1e-5,
            rtol=1e-5,  # distance is in tokens: up to hundreds at 1000 tokens
            msg=name,
        )


def words(n: int) -> str:
    return " ".join(f"t{(7 * i) % 97}" for i in range(n))


@pytest.mark.parametrize("chunk_elements", [53, 2**22])
def test_llama_statistics_equal_the_traced_weights(tiny_llama, chunk_elements):
    text = words(61)
    result = long_text_statistics(tiny_llama, text, chunk_elements=chunk_elements)
    expected, received = traced_means(tiny_llama, tiny_llama.tokenize([text]))
    assert_means_equal(result, expected)
    torch.testing.assert_close(torch.from_numpy(result.received), received, atol=1e-5, rtol=1e-6)
    assert not result.truncated and len(result.tokens) == 61


def test_bert_statistics_equal_the_traced_weights(tiny):
    text = "Attention heads read the text one query at a time; " * 3
    result = long_text_statistics(tiny, text)
    expected, received = traced_means(tiny, tiny.tokenize([text], tiny.max_positions))
    assert_means_equal(result, expected)
    torch.testing.assert_close(torch.from_numpy(result.received), received, atol=1e-5, rtol=1e-6)


def test_a_text_longer_than_asked_is_cut_and_says_so(tiny_llama):
    result = long_text_statistics(tiny_llama, words(50), max_tokens=19)
    assert len(result.tokens) == 19 and result.text_tokens == 50 and result.truncated
    assert result.received.shape == (3, 6, 19)
    document = result.result().to_dict()
    assert document["context"] == {"n_tokens": 19, "text_tokens": 50, "truncated": True}


def test_heavy_hitters_leave_out_the_special_positions(tiny_llama):
    result = long_text_statistics(tiny_llama, words(40))
    received = torch.from_numpy(result.received)  # (layer, head, k_pos)
    share, top = heavy_hitters(received, [0])
    assert share.shape == (3, 6) and top.shape == (3, 6, 1)
    assert (top != 0).all()
    expected = received[..., 1:].amax(-1) / received[..., 1:].sum(-1)
    torch.testing.assert_close(share, expected)


def test_the_result_holds_the_heavy_hitters_apart_from_the_models_special_positions(tiny_llama):
    """What ``long_text_statistics`` returns is plain data (no tensor): its heavy hitters are
    ``heavy_hitters`` of its own ``received`` apart from its ``special`` positions (the first
    token of a Llama), written in the results file as they are."""
    result = long_text_statistics(tiny_llama, words(40))
    assert result.special == [0]
    share, top = heavy_hitters(torch.from_numpy(result.received), result.special)
    document = result.result()
    assert document.heavy_hitters.top_share == share.tolist()
    assert document.heavy_hitters.top_keys == top[..., :TOP_KEYS_KEPT].tolist()
    assert document.heavy_hitters.excluded_positions == [0]
    assert document.findings == long_context_findings(result.statistics, share)
    assert document.context.n_tokens == len(result.tokens) == result.received.shape[-1]
    assert not any(isinstance(v, torch.Tensor) for v in vars(result).values())


def test_findings_count_the_sinks(tiny_llama):
    result = long_text_statistics(tiny_llama, words(40))
    share, _ = heavy_hitters(torch.from_numpy(result.received), [0])
    findings = long_context_findings(result.statistics, share)
    first = torch.tensor(result.statistics.metrics["first"])
    assert findings.sinks == int((first > SINK_THRESHOLD).sum())
    assert findings.sink_share == findings.sinks / 18
    assert len(findings.mean_distance_per_layer) == 3
    assert findings.most_concentrated[0][2] == pytest.approx(float(share.max()))


@pytest.mark.parametrize(
    ("text", "max_tokens", "message"),
    [("   ", None, "empty text"), (words(5), 65, "max_tokens"), (words(5), 1, "max_tokens")],
)
def test_bad_input_is_refused(tiny_llama, text, max_tokens, message):
    with pytest.raises(ValueError, match=message):
        long_text_statistics(tiny_llama, text, max_tokens=max_tokens)


def test_batched_statistics_of_padded_texts_equal_one_text_at_a_time(tiny_llama):
    texts = [words(9), words(31), words(17)]
    together = head_statistics(tiny_llama, texts, batch_size=3, max_length=64)
    apart = head_statistics(tiny_llama, texts, batch_size=1, max_length=64)
    for name, grid in together.metrics.items():
        torch.testing.assert_close(
            torch.tensor(grid), torch.tensor(apart.metrics[name]), atol=1e-5, rtol=0
        )


@pytest.mark.model
@pytest.mark.parametrize("n_tokens", [1000])
def test_smollm2_statistics_equal_the_traced_weights(smollm2, n_tokens):
    from headlab.models import long_document

    result = long_text_statistics(smollm2, long_document(), max_tokens=n_tokens)
    assert len(result.tokens) == n_tokens and result.truncated
    expected, received = traced_means(smollm2, smollm2.tokenize([long_document()], n_tokens))
    assert_means_equal(result, expected)
    torch.testing.assert_close(torch.from_numpy(result.received), received, atol=1e-3, rtol=1e-5)


@pytest.mark.model
def test_minilm_statistics_equal_the_traced_weights(minilm):
    from headlab.models import long_document

    result = long_text_statistics(minilm, long_document())
    assert len(result.tokens) == 512 and result.truncated
    expected, received = traced_means(minilm, minilm.tokenize([long_document()], 512))
    assert_means_equal(result, expected)
    torch.testing.assert_close(torch.from_numpy(result.received), received, atol=1e-3, rtol=1e-5)
