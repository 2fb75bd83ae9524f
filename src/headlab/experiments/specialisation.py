"""Which head serves which lookup: head ablation on the multi-lookup task, over training.

For a model trained on ``multi-lookup`` (the query must return the values of D = 4 keys), each
head of the (one) attention layer is ablated in turn (``head_mask``: its output zeroed before
W_O) and each lookup's accuracy is measured on held-out data. ``drop[h, d]`` = accuracy of
lookup d with every head minus without head h: the heads x lookups matrix. It is measured at
every evaluation of training (checkpoints of the same run), for plain and talking heads.

A lookup is *served* by head h when removing h costs it at least ``SERVED`` accuracy and no head
costs it more. The *split step* is the first checkpoint at which the D lookups are served by
min(H, D) different heads: the heads have divided the work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch

from headlab.attention.sizes import check_divides
from headlab.experiments.run_sizing import make_config
from headlab.experiments.sweep_tasks import Batch, generate
from headlab.experiments.tiny_transformer import TinyTransformer
from headlab.experiments.train import EVAL_SEED_OFFSET, run_one
from headlab.limits import check_int, check_seed, check_sizes
from headlab.results.run_config import ATTENTION_KINDS
from headlab.results.specialisation_result import (
    Checkpoint,
    SpecialisationResult,
    SpecialisationRun,
)

SERVED = 0.2  # accuracy a lookup must lose without a head for that head to serve it
TASK = "multi-lookup"


def lookup_accuracy(model: TinyTransformer, batch: Batch, head_mask: torch.Tensor | None) -> list:
    """Accuracy of each output (lookup) of ``batch``: D floats. head_mask (head,) on layer 0."""
    masks = [head_mask] + [None] * (len(model.blocks) - 1)
    model.eval()
    with torch.no_grad():
        logits, _ = model(batch.tokens, head_mask=masks)  # (batch, output, class)
    model.train()
    return (logits.argmax(-1) == batch.labels).double().mean(0).tolist()


def ablation_matrix(model: TinyTransformer, batch: Batch) -> tuple[list, list]:
    """(accuracy per lookup (D,), accuracy per lookup without each head (H, D)) for layer 0."""
    heads = model.blocks[0].attn.num_heads
    base = lookup_accuracy(model, batch, None)
    ablated = []
    for h in range(heads):
        mask = torch.ones(heads)
        mask[h] = 0.0
        ablated.append(lookup_accuracy(model, batch, mask))
    return base, ablated


def served_by(base: list, ablated: list) -> list[int | None]:
    """For each lookup, the head whose removal costs it most if that is >= SERVED, else None."""
    drop = np.asarray(base)[None, :] - np.asarray(ablated)  # (head, lookup)
    return [int(np.argmax(col)) if col.max() >= SERVED else None for col in drop.T]


def split_step(checkpoints: list[Checkpoint], heads: int) -> int | None:
    """The first checkpoint step at which the lookups are served by min(heads, D) different
    heads (module docstring); None for one head or when it never happens."""
    if heads == 1:
        return None
    for point in checkpoints:
        served = point.served_by
        if None not in served and len(set(served)) == min(heads, len(served)):
            return point.step
    return None


def settled_step(checkpoints: list[Checkpoint]) -> int:
    """The first checkpoint step from which the lookups' serving heads no longer change."""
    final = checkpoints[-1].served_by
    step = checkpoints[-1].step
    for point in reversed(checkpoints):
        if point.served_by != final:
            break
        step = point.step
    return step


@dataclass(frozen=True)
class SpecialisationRequest:
    """The runs: every head count x attention kind, one seed; defaults take about 2 minutes."""

    heads: tuple[int, ...] = (1, 2, 4, 8)
    attention: tuple[str, ...] = ("plain", "talking-heads")
    d_model: int = 64
    steps: int = 800
    eval_every: int = 50
    eval_size: int = 512
    seed: int = 0

    def __post_init__(self) -> None:
        """ValueError naming the field, before any run trains."""
        if not self.heads:
            raise ValueError("heads must list at least one head count, got none")
        object.__setattr__(self, "heads", check_sizes("heads", self.heads, high=64))
        check_int("steps", self.steps, high=10**6)
        check_int("eval_every", self.eval_every, high=10**6)
        check_seed("seed", self.seed)
        for h in self.heads:
            check_divides("d_model", self.d_model, "heads", h)
        for kind in self.attention or ("",):
            if kind not in ATTENTION_KINDS:
                kinds = ", ".join(ATTENTION_KINDS)
                raise ValueError(f"attention must be one of {kinds}, got {kind!r}")

    def steps_total(self) -> int:
        """Checkpoints over all runs: the total of ``measure_specialisation``'s ``on_step``."""
        return len(self.plan()) * -(-self.steps // self.eval_every)

    def plan(self) -> list[tuple[str, int]]:
        """(attention, heads) of each run; talking heads with one head is left out (a 1 x 1
        mixing only rescales the one head)."""
        return [(a, h) for a in self.attention for h in self.heads if a == "plain" or h > 1]


def measure_specialisation(
    config: SpecialisationRequest | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> SpecialisationResult:
    """Train each run of ``config`` with head ablations at every evaluation.

    ``on_step(done, total)`` counts checkpoints over all runs. Talking heads with one head is
    skipped (a 1 x 1 mixing only rescales the one head).
    """
    config = config or SpecialisationRequest()
    plan, total = config.plan(), config.steps_total()
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if on_step is not None:
            on_step(done, total)

    batch = generate(TASK, config.eval_size, config.seed + EVAL_SEED_OFFSET + 1)
    runs = [_one_run(config, attention, h, batch, tick) for attention, h in plan]
    return SpecialisationResult(config=asdict(config), runs=runs)


def _one_run(
    config: SpecialisationRequest, attention: str, heads: int, batch: Batch, tick: Callable
) -> SpecialisationRun:
    run_config = make_config(
        TASK,
        heads,
        d_model=config.d_model,
        seed=config.seed,
        steps=config.steps,
        eval_every=config.eval_every,
        eval_size=config.eval_size,
        attention=attention,
    )
    checkpoints: list[Checkpoint] = []

    def record(step: int, model: TinyTransformer) -> None:
        base, ablated = ablation_matrix(model, batch)
        checkpoints.append(Checkpoint(step, base, ablated, served_by(base, ablated)))
        tick()

    result = run_one(run_config, on_checkpoint=record)
    return SpecialisationRun(
        num_heads=heads,
        head_dim=run_config.head_dim,
        attention=attention,
        params=result.params,
        accuracy=float(np.mean(checkpoints[-1].accuracy)),
        split_step=split_step(checkpoints, heads),
        settled_step=settled_step(checkpoints),
        checkpoints=checkpoints,
    )
