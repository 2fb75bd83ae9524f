"""Head roles at long context against the same scores computed from the full weights.

A hand-built text with a known repeat runs through a tiny random decoder once with the streaming
pass (``long_text_statistics``) and once through ``trace_batch`` (every layer's full weights,
q, k, v): window errors, copy weights, retrieval scores, blocked maps and received profiles must
agree (1e-5), and the roles must follow their rules.
"""

from __future__ import annotations

import pytest
import torch

from headlab.heads.long_context import long_text_statistics
from headlab.heads.repeats import copy_sources, copy_task
from headlab.heads.roles import head_roles, role
from headlab.results.head_roles import ROLES
from headlab.results.long_context_result import LongContextResult


def test_copy_sources_by_hand():
    ids = torch.tensor([5, 6, 7, 8, 9, 1, 2, 5, 6, 7, 8, 9, 3])
    want = [-1] * 13
    want[9], want[10] = 3, 4  # (5 6 7) then 8, (6 7 8) then 9; (7 8 9) then 1 vs 3: no copy
    assert copy_sources(ids, min_match=3).tolist() == want
    # the third time round, each 2-gram has been seen twice: ambiguous, no source
    thrice = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2, 3])
    assert copy_sources(thrice, min_match=2).tolist() == [-1, -1, -1, -1, 2, 3, 4, -1, -1]
    assert (copy_sources(torch.arange(30), min_match=2) == -1).all()


def test_role_rules():
    assert role(0.2, 0.0, 0.9, 0.9) == "retrieval"
    assert role(0.05, 0.4, 0.9, 0.9) == "copy"
    assert role(None, None, 0.5, 0.01) == "sink"
    assert role(0.0, 0.0, 0.1, 0.01) == "local"
    assert role(0.0, 0.1, 0.9, 0.5) == "mixed"


def _text() -> str:
    passage = " ".join(f"t{(11 * i) % 97}" for i in range(14))
    filler = " ".join(f"t{(3 * i + 1) % 89}" for i in range(23))
    return f"t0 {passage} {filler} {passage}"


def test_roles_equal_the_full_weights(tiny_llama):
    text = _text()
    window = (2, 5)
    result = long_text_statistics(tiny_llama, text, window=window, min_match=4)
    batch = tiny_llama.tokenize([text])
    ids = batch.input_ids[0]
    n = ids.shape[0]
    with torch.no_grad():
        logits, traces = tiny_llama.trace_batch(batch)
    sources = copy_sources(ids, 4)
    copies = (sources >= 0).nonzero()[:, 0]
    assert len(copies) == 14 - 4  # the passage after its first 4 tokens
    assert result.roles.copy_positions == len(copies)
    correct = logits[0, copies].argmax(-1) == ids[copies + 1]
    positions = torch.arange(n)
    keys = torch.arange(n)
    offset = positions[:, None] - keys[None, :]
    allowed = (((offset >= 0) & (offset < window[1])) | (keys[None, :] < window[0])).double()
    for layer, t in enumerate(traces):
        w = t.weights[0].double()  # (head, q, k)
        v = t.v[0].double().repeat_interleave(w.shape[0] // t.v.shape[1], dim=0)
        full = w @ v
        kept = w * allowed
        windowed = (kept @ v) / kept.sum(-1, keepdim=True)
        error = ((full - windowed).norm(dim=-1) / full.norm(dim=-1)).mean(-1)
        got = torch.tensor(result.roles.window_error[layer], dtype=torch.float64)
        torch.testing.assert_close(got, error, atol=1e-5, rtol=1e-5)
        on_source = w[:, copies, sources[copies]]  # (head, n_copy)
        got = torch.tensor(result.roles.copy_weight[layer], dtype=torch.float64)
        torch.testing.assert_close(got, on_source.mean(-1), atol=1e-5, rtol=1e-5)
        hits = w[:, copies].argmax(-1) == sources[copies][None, :]
        want = (hits & correct[None, :]).double().mean(-1)
        got = torch.tensor(result.roles.retrieval[layer], dtype=torch.float64)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
        group = result.roles.group_window_error[layer]
        assert group == pytest.approx(error.view(2, 3).amax(1).tolist(), abs=1e-5)
        # the blocked map and the received profile
        b = result.maps.block
        blocked = torch.zeros(w.shape[0], -(-n // b), -(-n // b), dtype=torch.float64)
        for q in range(n):
            for k in range(n):
                blocked[:, q // b, k // b] += w[:, q, k]
        rows = torch.bincount(positions // b).double()
        got = torch.tensor(result.maps.blocked[layer], dtype=torch.float64)
        torch.testing.assert_close(got, blocked / rows[None, :, None], atol=1e-3, rtol=1e-3)
        got = torch.tensor(result.maps.received[layer], dtype=torch.float64)
        torch.testing.assert_close(got, w.sum(1), atol=1e-3, rtol=1e-3)
    for layer_roles in result.roles.roles:
        assert all(r in ROLES for r in layer_roles)
    document = result.result()
    assert LongContextResult.from_dict(document.to_dict()) == document


def test_a_text_without_repeats_or_shorter_than_the_window_says_so(tiny_llama):
    plain = " ".join(f"t{i}" for i in range(30))
    result = long_text_statistics(tiny_llama, plain, window=(4, 256))
    assert result.roles.copy_positions == 0 and result.roles.retrieval is None
    assert result.roles.roles is None and result.roles.window_error is None
    assert "no copy positions (no repeat of an earlier passage)" in result.roles.note
    assert "not longer than 4 sinks + a window of 256" in result.roles.note
    with pytest.raises(ValueError, match="not more than sinks 4 \\+ window 256"):
        long_text_statistics(tiny_llama, plain, window=(4, 256), strict_window=True)


def test_copy_task_fits_and_repeats(tiny):
    task = copy_task(tiny, 37, passage_words=8, seed=3)
    assert tiny.count_tokens(task.text) <= 37
    assert task.text.count(task.text.split()[task.offset_words]) >= 2
    batch = tiny.tokenize([task.text], 37)
    sources = copy_sources(batch.input_ids[0])
    assert int((sources >= 0).sum()) >= 2  # the repeat's tokens after its first six
    assert copy_task(tiny, 37, passage_words=8, seed=3) == task  # seeded
    assert copy_task(tiny, 37, passage_words=8, seed=4).text != task.text
    with pytest.raises(ValueError, match="cannot hold a passage of 40 words twice"):
        copy_task(tiny, 10, passage_words=40)
    with pytest.raises(ValueError, match="n_tokens=10 cannot hold the built-in copy task"):
        copy_task(tiny, 10)
    with pytest.raises(ValueError, match="n_tokens must be between 2 and 37"):
        copy_task(tiny, 38)


def test_examples_are_each_roles_clearest_heads_by_its_rule():
    roles = head_roles(
        sinks=1,
        window=2,
        first=[[0.5, 0.1, 0.9], [0.0, 0.4, 0.2]],
        window_error=[[0.01, 0.02, 0.04], [0.3, 0.001, 0.2]],
        copy_weight=[[0.0, 0.0, 0.0], [0.35, 0.0, 0.5]],
        retrieval_hits=[[0, 0, 0], [4, 0, 0]],
        copies=10,
        kv_heads_per_layer=[3, 3],
        no_window="",
    )
    first = [[0.5, 0.1, 0.9], [0.0, 0.4, 0.2]]
    assert roles.roles == [["sink", "local", "sink"], ["retrieval", "sink", "copy"]]
    assert roles.examples("sink", first) == [(0, 2), (0, 0), (1, 1)]  # by first-token weight
    assert roles.examples("sink", first, count=1) == [(0, 2)]
    assert roles.examples("local", first) == [(0, 1)]
    assert roles.examples("retrieval", first) == [(1, 0)] and roles.examples("mixed", first) == []


def test_the_built_in_passage_shrinks_to_fit_half_a_short_context():
    """One token a word: 48 words twice fill 97 tokens; at 8192 the passage stays 48 words
    (the texts of earlier versions), at 120 it is the most words whose two copies and one
    filler word take at most 60 tokens: 29 (2 x 29 + 1 = 59), and the text fills the 120."""
    from types import SimpleNamespace

    words = SimpleNamespace(max_positions=10_000, count_tokens=lambda text: len(text.split()))
    assert copy_task(words, 8192, seed=2).passage_words == 48
    task = copy_task(words, 120, seed=2)
    assert task.passage_words == 29 and len(task.text.split()) == 120
    text = task.text.split()
    passage = text[task.offset_words : task.offset_words + 29]
    assert text[-29:] == passage
    # the shorter passage is the start of the long one: the seed draws the same words
    long = copy_task(words, 8192, seed=2).text.split()
    first = copy_task(words, 8192, seed=2).offset_words
    assert long[first : first + 29] == passage
