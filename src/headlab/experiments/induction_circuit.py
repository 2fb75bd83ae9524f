"""When the induction circuit forms: the 2-layer models that ``headlab sweep --task induction``
trains, measured with ``headlab.circuits`` at checkpoints along the run.

The run is the sweep's own (``experiments/train.py``'s ``run_one`` on the ``RunConfig`` that
``headlab sweep --task induction --layers 2 --heads h`` makes: the same ``TinyTransformer``,
seeds, data, optimizer, schedule and loss). At every ``every`` steps (the sweep's evaluation
steps) the model is copied into the transformers GPT-2 that computes the same logits
(``experiments/sweep_gpt2.py``), where the circuits tools run, and a checkpoint records, on the
sweep's own held-out data:
- the loss and accuracy of the answer at the last position (the sweep's curve);
- the best previous-token head of layer 0 and the best induction head of layer 1, by
  headlab's detectors (``heads/detectors.py``, on 12 random tokens repeated);
- the K-composition of that pair (``circuits/composition.py``, LayerNorm scales folded) and its
  random baseline;
- the exact path-patching effect (``circuits/patching.py``) of the edge previous-token head ->
  induction head's key input on the mean log-probability of the answer. The corrupted input
  replaces the earlier occurrence of the last token A by another symbol, so in it nothing says
  where B follows A;
- the effect of the whole K path: every edge from a layer-0 head into a layer-1 head's key
  input patched at once (``circuits/circuit_patching.py``), which catches a circuit spread over
  several heads where one edge carries little.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.circuits.attribution import edge_attribution
from headlab.circuits.circuit_patching import CircuitPatcher
from headlab.circuits.composition import composition_scores
from headlab.circuits.faithfulness import faithfulness_curve
from headlab.circuits.metrics import answer_logprob
from headlab.circuits.patching import Patcher
from headlab.experiments.run_sizing import make_config
from headlab.experiments.sweep_gpt2 import as_transformers
from headlab.experiments.sweep_tasks import INDUCTION, generate
from headlab.experiments.train import EVAL_SEED_OFFSET, run_one
from headlab.heads.detectors import detect_heads
from headlab.limits import check_int
from headlab.models.hf.adapter import TransformersModel
from headlab.results.circuit_edges import FaithfulnessCurve
from headlab.results.induction_circuit_result import (
    CircuitCheckpoint,
    FormationRun,
    InductionFormation,
    KEdges,
)
from headlab.results.run_config import RunConfig

DETECTOR_LENGTH = INDUCTION.seq_len // 2  # two copies fit the 24 positions
# (heads, step, steps, what runs at that step: "" once the checkpoint is measured, else the
# measuring's part and its count, "K edges: exact patching 812/4096")
Progress = Callable[[int, int, int, str], None]
Stage = Callable[[str, int, int], None]  # (what runs, done, total), within one checkpoint


def _quiet(what: str, done: int, total: int) -> None:
    pass


@dataclass(frozen=True)
class FormationRequest:
    """One run: ``heads`` per layer; the rest as ``headlab sweep --task induction --layers 2``
    sets it (d_model 64, batch 32, lr 3e-3, 512 held-out sequences), ``every`` its evaluation
    interval. ``composition_samples``: draws of the K-composition's random baseline."""

    heads: int
    steps: int = 800
    every: int = 50
    seed: int = 0
    d_model: int = 64
    layers: int = 2
    batch_size: int = 32
    lr: float = 3e-3
    eval_size: int = 512
    composition_samples: int = 16

    def __post_init__(self) -> None:
        check_int("heads", self.heads, low=1, high=self.d_model)
        if self.d_model % self.heads:
            raise ValueError(f"heads must divide d_model {self.d_model}, got {self.heads}")
        check_int("steps", self.steps, low=1, high=1_000_000)
        check_int("seed", self.seed, low=0, high=2**32 - 1)
        check_int("every", self.every, low=1, high=self.steps)
        check_int("batch_size", self.batch_size, low=1, high=65_536)
        check_int("eval_size", self.eval_size, low=1, high=65_536)
        check_int("composition_samples", self.composition_samples, low=1, high=100_000)
        if not 0.0 < self.lr <= 1.0:
            raise ValueError(f"lr must be in (0, 1], got {self.lr}")
        if self.layers != 2:
            raise ValueError(
                f"layers must be 2 (a previous-token and an induction layer), got {self.layers}"
            )

    def run_config(self) -> RunConfig:
        """The sweep's ``RunConfig`` of this run (its ``run_id`` names it in sweep.jsonl)."""
        return make_config(
            INDUCTION.name,
            self.heads,
            d_model=self.d_model,
            layers=self.layers,
            seed=self.seed,
            steps=self.steps,
            batch_size=self.batch_size,
            lr=self.lr,
            eval_every=self.every,
            eval_size=self.eval_size,
        )


def task_pairs(n: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """(clean, corrupted, answers), clean and corrupted (batch, pos) int64, answers (batch,):
    the task's sequences; the same with the earlier occurrence of the last token A replaced by
    another symbol (A + an offset in 1..15, mod 16); what followed A."""
    batch = generate(INDUCTION.name, n, seed)
    clean = batch.tokens[..., 0]
    vocab = INDUCTION.vocab_sizes[0]
    earlier = (clean[:, :-1] == clean[:, -1:]).int().argmax(dim=1)  # (batch,): A's position
    gen = torch.Generator().manual_seed(seed + 1)
    offset = torch.randint(1, vocab, (n,), generator=gen)
    corrupted = clean.clone()
    rows = torch.arange(n)
    corrupted[rows, earlier] = (clean[rows, earlier] + offset) % vocab
    return clean, corrupted, batch.labels[:, 0]


def last_logits(model: TransformersModel, ids: Tensor) -> Tensor:
    """(batch, pos) -> the logits at the last position, (batch, vocab)."""
    return model.model(input_ids=ids, logits_to_keep=1).logits[:, -1]


def measure(
    model: TransformersModel,
    step: int,
    pairs: tuple[Tensor, Tensor, Tensor],
    samples: int = 16,
    seed: int = 0,
    stage: Stage = _quiet,
) -> CircuitCheckpoint:
    """The checkpoint of ``model`` at ``step`` on held-out ``pairs`` (``task_pairs``);
    ``stage(what, done, total)`` as each part runs."""
    clean, corrupted, answers = pairs
    module = model.model
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            logits = last_logits(model, clean)
            loss = F.cross_entropy(logits, answers).item()
            accuracy = (logits.argmax(-1) == answers).double().mean().item()
            vocabulary = torch.arange(INDUCTION.vocab_sizes[0])
            stage("detectors", 0, 1)
            found = detect_heads(model, vocabulary, DETECTOR_LENGTH, count=32, seed=seed)
        prev = found["previous_token"][0]
        ind = found["induction"][1]
        p = max(range(len(prev)), key=prev.__getitem__)
        i = max(range(len(ind)), key=ind.__getitem__)
        scores = composition_scores(
            model, samples=samples, seed=seed, on_layer=lambda d, n: stage("composition", d, n)
        )
        k = scores.score("k", f"0.{p}", f"1.{i}")
        edge = f"0.{p}->1.{i}<k>"
        stage("patching", 0, 2)
        patcher = Patcher(model, clean, corrupted, _answer_metric(clean, answers))
        effect = float(patcher.effects([edge])[0])
        stage("patching", 1, 2)
        heads = range(len(prev))
        every_k = {f"0.{s}->1.{r}<k>" for s in heads for r in range(len(ind))}
        k_path = float(CircuitPatcher(patcher).metric([every_k])[0]) - patcher.clean_value
    finally:
        module.train(was_training)
    return CircuitCheckpoint(
        step=step,
        loss=loss,
        accuracy=accuracy,
        previous_head=p,
        previous_score=float(prev[p]),
        induction_head=i,
        induction_score=float(ind[i]),
        k_composition=float(k),
        k_baseline=float(scores.baseline_for("k")),
        edge=edge,
        patching_effect=effect,
        clean_metric=patcher.clean_value,
        corrupted_metric=patcher.corrupted_value,
        k_path_effect=k_path,
    )


def k_edges(
    model: TransformersModel,
    pairs: tuple[Tensor, Tensor, Tensor],
    samples: int = 16,
    seed: int = 0,
    stage: Stage = _quiet,
) -> KEdges:
    """Every K edge 0.s -> 1.r<k> of ``model`` scored by composition, EAP, EAP-IG (5 steps)
    and exact path patching on ``pairs``, with the detectors' scores of every head;
    ``stage(what, done, total)`` as each part runs (exact patching: edge by edge)."""
    clean, corrupted, answers = pairs
    stage("K edges: detectors", 0, 1)
    with torch.no_grad():
        found = detect_heads(
            model, torch.arange(INDUCTION.vocab_sizes[0]), DETECTOR_LENGTH, count=32, seed=seed
        )
    prev, ind = found["previous_token"][0], found["induction"][1]
    pairs_sr = [(s, r) for s in range(len(prev)) for r in range(len(ind))]
    edges = [f"0.{s}->1.{r}<k>" for s, r in pairs_sr]
    scores = composition_scores(
        model, samples=samples, seed=seed, on_layer=lambda d, n: stage("K edges: composition", d, n)
    )
    patcher = Patcher(model, clean, corrupted, _answer_metric(clean, answers))
    attributed = {
        method: edge_attribution(
            model,
            clean,
            corrupted,
            patcher.metric,
            method=method,
            edges=edges,
            patcher=patcher,
            progress=lambda d, n, m=method: stage(f"K edges: {m}", d, n),
        ).scores
        for method in ("eap", "eap-ig")
    }
    exact = patcher.effects(edges, progress=lambda d, n: stage("K edges: exact patching", d, n))
    return KEdges(
        edges=edges,
        composition=[float(scores.score("k", f"0.{s}", f"1.{r}")) for s, r in pairs_sr],
        eap=[float(v) for v in attributed["eap"]],
        eap_ig=[float(v) for v in attributed["eap-ig"]],
        exact=[float(v) for v in exact],
        previous_scores=[float(v) for v in prev],
        induction_scores=[float(v) for v in ind],
    )


FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)  # the 1, 2, 5% and the rest of a curve


def circuit_faithfulness(
    model: TransformersModel,
    pairs: tuple[Tensor, Tensor, Tensor],
    seeds: int = 3,
    stage: Stage = _quiet,
) -> FaithfulnessCurve:
    """The faithfulness of the top-n EAP-IG (5 steps) circuits of ``model``'s whole graph at
    ``FRACTIONS`` of its edges, beside ``seeds`` random circuits of each size;
    ``stage(what, done, total)`` as each part runs."""
    clean, corrupted, answers = pairs
    patcher = Patcher(model, clean, corrupted, _answer_metric(clean, answers))
    scores = edge_attribution(
        model,
        clean,
        corrupted,
        patcher.metric,
        method="eap-ig",
        patcher=patcher,
        progress=lambda d, n: stage("faithfulness: eap-ig", d, n),
    )
    return faithfulness_curve(
        CircuitPatcher(patcher),
        scores,
        FRACTIONS,
        seeds=seeds,
        progress=lambda d, n: stage("faithfulness: circuits", d, n),
    )


def _answer_metric(clean: Tensor, answers: Tensor):
    """log p(answer) at the last position of every sequence."""
    mask = torch.zeros(clean.shape, dtype=torch.bool)
    mask[:, -1] = True
    full = torch.zeros(clean.shape, dtype=torch.long)
    full[:, -1] = answers
    return answer_logprob(mask, full)


def train_and_measure(config: FormationRequest, progress: Progress | None = None) -> FormationRun:
    """Train the sweep's model of ``config`` (``run_one``) and measure it at each of its
    evaluations (every ``config.every`` steps and at the end)."""
    run = config.run_config()
    held_out = task_pairs(run.eval_size, run.seed + EVAL_SEED_OFFSET)  # the sweep's eval data
    checkpoints = []

    def stage_of(step: int) -> Stage:
        def stage(what: str, done: int, total: int) -> None:
            if progress is not None:
                progress(config.heads, step, config.steps, f"{what} {done}/{total}")

        return stage

    def on_checkpoint(step: int, tiny) -> None:
        model = as_transformers(tiny, name=f"sweep-induction-h{config.heads}")
        checkpoints.append(
            measure(model, step, held_out, config.composition_samples, config.seed, stage_of(step))
        )
        if progress is not None and step != config.steps:
            progress(config.heads, step, config.steps, "")

    final = {}

    def on_final(step: int, tiny) -> None:
        on_checkpoint(step, tiny)
        if step == config.steps:
            model = as_transformers(tiny)
            final["k"] = k_edges(
                model, held_out, config.composition_samples, config.seed, stage_of(step)
            )
            final["curve"] = circuit_faithfulness(model, held_out, stage=stage_of(step))
            if progress is not None:
                progress(config.heads, step, config.steps, "")

    run_one(run, on_checkpoint=on_final)
    heads = f"{run.num_heads} head{'s' * (run.num_heads > 1)}"
    return FormationRun(
        heads=config.heads,
        seed=config.seed,
        steps=config.steps,
        model=f"the sweep's TinyTransformer (run_id {run.run_id}): d_model {run.d_model}, "
        f"{run.layers} layers, {heads} of {run.head_dim}, MLP "
        f"{run.mlp_ratio * run.d_model}, vocab {INDUCTION.vocab_sizes[0]}, {INDUCTION.seq_len} "
        f"positions, batch {run.batch_size}, lr {run.lr}; measured as the GPT-2 with its "
        f"weights",
        checkpoints=checkpoints,
        k_edges=final.get("k"),
        faithfulness=final.get("curve"),
    )


def induction_formation(
    heads: list[int],
    steps: int = 800,
    every: int = 50,
    seed: int | Sequence[int] = 0,
    progress: Progress | None = None,
    lr: float = 3e-3,
) -> InductionFormation:
    """One ``train_and_measure`` run per head count and seed (``seed``: one, or several
    distinct), head count first; every config is checked before any run."""
    if not heads:
        raise ValueError("heads must name at least one head count, got none")
    seeds = [seed] if isinstance(seed, int) else list(seed)
    if not seeds:
        raise ValueError("seed must name at least one seed, got none")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seed must name distinct seeds, got {seeds}")
    configs = [
        FormationRequest(heads=h, steps=steps, every=every, seed=s, lr=lr)
        for h in heads
        for s in seeds
    ]
    runs = [train_and_measure(c, progress) for c in configs]
    return InductionFormation(task=INDUCTION.name, metric="logprob", runs=runs)


__all__ = [
    "FormationRequest",
    "circuit_faithfulness",
    "induction_formation",
    "k_edges",
    "measure",
    "task_pairs",
    "train_and_measure",
]
