"""Head ablation per lookup: the matrix against an independent computation, the split step."""

import numpy as np
import pytest
import torch

from headlab.experiments.run_sizing import make_config
from headlab.experiments.specialisation import (
    SpecialisationRequest,
    ablation_matrix,
    measure_specialisation,
    served_by,
    settled_step,
    split_step,
)
from headlab.experiments.sweep_tasks import generate
from headlab.experiments.tiny_transformer import TinyTransformer
from headlab.results.specialisation_result import Checkpoint, SpecialisationResult


@pytest.mark.parametrize("attention", ["plain", "talking-heads"])
def test_ablation_matrix_against_zeroed_output_projection(attention):
    """Removing head h with head_mask equals zeroing head h's columns of W_O (independent)."""
    torch.manual_seed(0)
    config = make_config("multi-lookup", 4, d_model=12, attention=attention)
    model = TinyTransformer(config)
    batch = generate("multi-lookup", 37, seed=5)
    base, ablated = ablation_matrix(model, batch)
    assert np.asarray(ablated).shape == (4, 4)
    for h in range(4):
        with torch.no_grad():
            w = model.blocks[0].attn.out_proj.weight
            saved = w[:, 3 * h : 3 * h + 3].clone()
            w[:, 3 * h : 3 * h + 3] = 0.0
            logits, _ = model(batch.tokens)
            w[:, 3 * h : 3 * h + 3] = saved
        expected = (logits.argmax(-1) == batch.labels).double().mean(0).numpy()
        np.testing.assert_allclose(ablated[h], expected)
    logits, _ = model(batch.tokens)
    np.testing.assert_allclose(base, (logits.argmax(-1) == batch.labels).double().mean(0))


def _point(step: int, served: list[int | None]) -> Checkpoint:
    """A checkpoint whose serving heads are ``served`` (accuracies unused here)."""
    return Checkpoint(step, [0.5] * len(served), [], served)


def test_served_by_and_split_step_hand_cases():
    base = [0.9, 0.9, 0.9]
    ablated = [[0.1, 0.9, 0.85], [0.9, 0.2, 0.5]]  # head 0 serves lookup 0, head 1 lookups 1, 2
    assert served_by(base, ablated) == [0, 1, 1]
    assert served_by(base, [[0.8, 0.8, 0.8], [0.9, 0.9, 0.9]]) == [None, None, None]
    points = [_point(10, [0, None, 1]), _point(20, [0, 0, 0]), _point(30, [1, 0, 1])]
    assert split_step(points, heads=2) == 30
    assert split_step(points, heads=1) is None
    assert split_step(points, heads=3) is None  # never 3 different heads
    assert settled_step(points) == 30
    assert settled_step([*points, _point(40, [1, 0, 1])]) == 30
    assert settled_step([_point(5, [None]), _point(9, [None])]) == 5


def test_measure_small_schema_round_trip():
    config = SpecialisationRequest(heads=(1, 2), steps=20, eval_every=10, eval_size=16, d_model=8)
    ticks = []
    result = measure_specialisation(config, on_step=lambda d, t: ticks.append((d, t)))
    assert ticks[-1] == (6, 6)  # plain 1, plain 2, talking 2; two checkpoints each
    kinds = [(r.attention, r.num_heads) for r in result.runs]
    assert kinds == [("plain", 1), ("plain", 2), ("talking-heads", 2)]
    for run in result.runs:
        assert [c.step for c in run.checkpoints] == [10, 20]
        assert np.asarray(run.checkpoints[-1].ablated).shape == (run.num_heads, 4)
    assert result.runs[2].params == result.runs[1].params + 2 * 2 * 2
    assert SpecialisationResult.from_dict(result.to_dict()) == result


def test_plain_runs_keep_their_run_id_and_talking_heads_differ():
    plain = make_config("multi-lookup", 4)
    assert "attention" not in plain.to_dict()
    talking = make_config("multi-lookup", 4, attention="talking-heads")
    assert talking.to_dict()["attention"] == "talking-heads" and talking.run_id != plain.run_id
    with pytest.raises(ValueError, match="attention must be one of plain, talking-heads"):
        make_config("multi-lookup", 4, attention="mixed")


def test_talking_heads_run_reports_no_entropy():
    from headlab.experiments.train import run_one

    config = make_config("multi-lookup", 2, d_model=8, steps=3, attention="talking-heads")
    result = run_one(config)
    assert result.head_entropy == []
    assert result.rows()[-1]["config"]["attention"] == "talking-heads"


def test_a_config_that_cannot_run_is_refused_naming_the_field():
    from headlab.experiments.specialisation import SpecialisationRequest

    with pytest.raises(ValueError, match=r"^d_model=64 is not divisible by heads=3$"):
        SpecialisationRequest(heads=(1, 3))
    with pytest.raises(ValueError, match="attention must be one of plain, talking-heads"):
        SpecialisationRequest(attention=("plain", "fancy"))
    config = SpecialisationRequest(heads=(1, 2), steps=100, eval_every=30)
    assert config.plan() == [("plain", 1), ("plain", 2), ("talking-heads", 2)]
    assert config.steps_total() == 3 * 4  # checkpoints at 30, 60, 90 and the end
