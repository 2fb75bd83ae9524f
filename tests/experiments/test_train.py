"""The model and one run: equal parameters across head splits, entropy, purity of run_one."""

import math

import pytest
import torch

from headlab.analysis.params import parameter_count
from headlab.experiments.run_sizing import make_config
from headlab.experiments.sweep_tasks import generate
from headlab.experiments.tiny_transformer import TinyTransformer, attention_entropy
from headlab.experiments.train import run_one
from headlab.results.run_config import RunConfig


@pytest.mark.parametrize("task,layers", [("multi-lookup", 1), ("recall", 1), ("induction", 2)])
def test_parameter_count_is_the_same_for_every_head_count(task, layers):
    counts = {
        h: parameter_count(TinyTransformer(make_config(task, h, d_model=48, layers=layers)))
        for h in (1, 2, 3, 4, 6, 8, 12, 16, 24, 48)
    }
    assert len(set(counts.values())) == 1, counts


def test_logits_shapes_for_last_and_all_readouts():
    for task, outputs in (("multi-lookup", 4), ("recall", 1), ("induction", 1)):
        model = TinyTransformer(make_config(task, 4, d_model=16, layers=2))
        batch = generate(task, 5, seed=0)
        logits, weights = model(batch.tokens, need_weights=True)
        assert logits.shape == (5, outputs, model.spec.num_classes)
        assert len(weights) == 2 and weights[0].shape[:2] == (5, 4)


def test_causal_task_never_attends_to_later_positions():
    model = TinyTransformer(make_config("induction", 2, d_model=16, layers=2))
    _, weights = model(generate("induction", 3, seed=1).tokens, need_weights=True)
    for w in weights:  # (batch, head, q_pos, k_pos)
        assert torch.all(w.triu(1) == 0)


def test_attention_entropy_matches_a_hand_computation():
    # head 0: uniform over 4 keys (ln 4); head 1: one-hot (0); last query row only.
    w = torch.zeros(2, 2, 3, 4)
    w[:, 0] = 0.25
    w[:, 1, :, 2] = 1.0
    w[:, 1, 0] = 0.25  # an earlier row that the "last" readout must ignore
    got = attention_entropy([w], "last")
    assert got == pytest.approx([math.log(4), 0.0], abs=1e-6)
    assert attention_entropy([w], "all")[1] == pytest.approx(math.log(4) / 3, abs=1e-6)


def test_run_one_is_a_pure_function_of_its_config():
    config = make_config("multi-lookup", 2, d_model=16, steps=7, seed=3, eval_every=3, eval_size=64)
    a, b = run_one(config), run_one(config)
    assert [p.step for p in a.curve] == [3, 6, 7]
    assert a.curve == b.curve and a.head_entropy == b.head_entropy
    assert len(a.head_entropy) == 2 and a.params == b.params
    other = run_one(make_config("multi-lookup", 2, d_model=16, steps=7, seed=4, eval_size=64))
    assert other.final.loss != a.final.loss


def test_training_learns_the_multi_lookup_task_with_enough_heads():
    result = run_one(make_config("multi-lookup", 4, steps=250, seed=0, eval_size=256))
    chance = 1 / 32
    assert result.final.accuracy > 10 * chance, result.final


def test_run_id_is_a_stable_hash_of_the_config():
    a = make_config("recall", 4)
    assert a.run_id == make_config("recall", 4, head_dim=16, num_kv_heads=4).run_id
    assert a.run_id != make_config("recall", 4, seed=1).run_id
    assert RunConfig.from_dict(a.to_dict()) == a
    assert len(a.run_id) == 16 and int(a.run_id, 16) >= 0


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"num_heads": 3}, "not divisible by num_heads=3"),
        ({"num_heads": 4, "num_kv_heads": 3}, "num_heads=4 is not divisible by num_kv_heads=3"),
        ({"num_heads": 4, "task": "nope"}, "unknown task"),
        ({"num_heads": 4, "steps": 0}, "steps must be a positive integer"),
    ],
)
def test_make_config_rejects_what_cannot_run(kwargs, match):
    kwargs = {"task": "multi-lookup", **kwargs}
    with pytest.raises(ValueError, match=match):
        make_config(kwargs.pop("task"), kwargs.pop("num_heads"), **kwargs)
