"""Task generators: deterministic per seed, and labels equal to a direct per-example computation."""

import pytest
import torch

from headlab.experiments.sweep_tasks import TASKS, generate, get_task


@pytest.mark.parametrize("name", sorted(TASKS))
def test_same_seed_same_batch_other_seed_other_batch(name):
    a, b, c = generate(name, 37, seed=5), generate(name, 37, seed=5), generate(name, 37, seed=6)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.labels, b.labels)
    assert not torch.equal(a.tokens, c.tokens)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_shapes_and_ranges_match_the_spec(name):
    spec, _ = get_task(name)
    batch = generate(name, 23, seed=1)
    assert batch.tokens.shape == (23, spec.seq_len, len(spec.vocab_sizes))
    assert batch.labels.shape == (23, spec.num_outputs)
    assert batch.tokens.dtype == batch.labels.dtype == torch.int64
    for f, vocab in enumerate(spec.vocab_sizes):
        assert batch.tokens[..., f].min() >= 0 and batch.tokens[..., f].max() < vocab
    assert batch.labels.min() >= 0 and batch.labels.max() < spec.num_classes


def _lookup(tokens, key):
    """The value stored with ``key`` in one example, found by a plain scan."""
    hits = [int(v) for k, v in tokens[:-1].tolist() if k == key]
    assert len(hits) == 1, f"key {key} must occur exactly once, found {len(hits)}"
    return hits[0]


def test_multi_lookup_labels_are_the_values_of_keys_0_to_3():
    spec, _ = get_task("multi-lookup")
    batch = generate("multi-lookup", 41, seed=3)
    for tokens, labels in zip(batch.tokens, batch.labels, strict=True):
        assert tokens[-1].tolist() == [spec.vocab_sizes[0] - 1, spec.vocab_sizes[1] - 1]
        assert labels.tolist() == [_lookup(tokens, d) for d in range(spec.num_outputs)]


def test_recall_label_is_the_value_of_the_queried_key():
    batch = generate("recall", 41, seed=4)
    for tokens, labels in zip(batch.tokens, batch.labels, strict=True):
        assert labels.tolist() == [_lookup(tokens, int(tokens[-1, 0]))]


def test_induction_label_follows_the_only_earlier_copy_of_the_last_token():
    batch = generate("induction", 53, seed=7)
    for tokens, labels in zip(batch.tokens[..., 0].tolist(), batch.labels, strict=True):
        last = tokens[-1]
        earlier = [i for i, t in enumerate(tokens[:-1]) if t == last]
        assert len(earlier) == 1 and earlier[0] <= len(tokens) - 3
        assert labels.tolist() == [tokens[earlier[0] + 1]]


def test_unknown_task_is_a_value_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown task 'nope'.*multi-lookup"):
        get_task("nope")
