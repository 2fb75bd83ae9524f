"""When the induction circuit forms: a 2-layer transformers GPT-2 trained on the sweep's
induction task, measured with ``headlab.circuits`` at checkpoints along the run.

The sweep trains headlab's own ``TinyTransformer``; the circuits tools run on the transformers
route. So the same task (``experiments/sweep_tasks.py``: 24 tokens over 16 symbols, the last one
seen once before, predict what followed it) is trained on a GPT-2 that transformers builds from
a config of the sweep's sizes (d_model 64, 2 layers, h heads, MLP 4 x d_model, learned
positions, LayerNorm, untied readout, no dropout), ``attach``-ed so that headlab's attention
runs inside it, with the sweep's optimizer (AdamW, weight decay 0.01, linear warm-up over 5% of
the steps, cosine decay; ``experiments/train.py``) and loss (cross-entropy of the answer at the
last position).

At every ``every`` steps (and the last) a checkpoint records, on held-out data:
- the loss and accuracy of the answer at the last position;
- the best previous-token head of layer 0 and the best induction head of layer 1, by
  headlab's detectors (``heads/detectors.py``, on 12 random tokens repeated);
- the K-composition of that pair (``circuits/composition.py``, LayerNorm scales folded) and its
  random baseline;
- the exact path-patching effect (``circuits/patching.py``) of the edge previous-token head ->
  induction head's key input on the mean log-probability of the answer. The corrupted input
  replaces the earlier occurrence of the last token A by another symbol, so in it nothing says
  where B follows A.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from headlab.circuits.composition import composition_scores
from headlab.circuits.metrics import answer_logprob
from headlab.circuits.patching import path_patching
from headlab.experiments.sweep_tasks import INDUCTION, generate, induction
from headlab.heads.detectors import detect_heads
from headlab.limits import check_int
from headlab.models.hf import attach
from headlab.models.hf.adapter import TransformersModel
from headlab.results.induction_circuit_result import (
    CircuitCheckpoint,
    FormationRun,
    InductionFormation,
)

EVAL_SEED_OFFSET = 1_000_003  # held-out data from seeds training never draws (as train.py)
DETECTOR_LENGTH = INDUCTION.seq_len // 2  # two copies fit the 24 positions
Progress = Callable[[int, int, int], None]  # (heads, step, steps)


@dataclass(frozen=True)
class FormationConfig:
    """One run: ``heads`` per layer; the sweep's sizes and optimizer settings by default."""

    heads: int
    steps: int = 800
    every: int = 50
    seed: int = 0
    d_model: int = 64
    layers: int = 2
    batch_size: int = 64
    lr: float = 3e-3
    eval_size: int = 256
    composition_samples: int = 16
    init_std: float = 0.02  # GPT-2's initializer_range

    def __post_init__(self) -> None:
        check_int("heads", self.heads, low=1, high=self.d_model)
        if self.d_model % self.heads:
            raise ValueError(f"heads must divide d_model {self.d_model}, got {self.heads}")
        check_int("steps", self.steps, low=1, high=1_000_000)
        check_int("every", self.every, low=1, high=self.steps)
        check_int("batch_size", self.batch_size, low=1, high=65_536)
        check_int("eval_size", self.eval_size, low=1, high=65_536)
        if not 0.0 < self.init_std <= 1.0:
            raise ValueError(f"init_std must be in (0, 1], got {self.init_std}")
        if self.layers != 2:
            raise ValueError(f"layers must be 2 (a previous-token and an induction layer), got "
                             f"{self.layers}")  # fmt: skip


def build_model(config: FormationConfig) -> TransformersModel:
    """A GPT-2 of the sweep's sizes, built by transformers from a config, seeded, attached."""
    import transformers

    torch.manual_seed(config.seed)
    gpt2 = transformers.GPT2Config(
        vocab_size=INDUCTION.vocab_sizes[0], n_positions=INDUCTION.seq_len,
        n_embd=config.d_model, n_layer=config.layers, n_head=config.heads,
        n_inner=4 * config.d_model, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=0,
        initializer_range=config.init_std,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(gpt2)
    return attach(model, name=f"induction-gpt2-h{config.heads}")


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
) -> CircuitCheckpoint:
    """The checkpoint of ``model`` at ``step`` on held-out ``pairs`` (``task_pairs``)."""
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
            found = detect_heads(model, vocabulary, DETECTOR_LENGTH, count=32, seed=seed)
        prev = found["previous_token"][0]
        ind = found["induction"][1]
        p = max(range(len(prev)), key=prev.__getitem__)
        i = max(range(len(ind)), key=ind.__getitem__)
        scores = composition_scores(model, samples=samples, seed=seed)
        k = scores.score("k", f"0.{p}", f"1.{i}")
        mask = torch.zeros(clean.shape, dtype=torch.bool)
        mask[:, -1] = True
        full = torch.zeros(clean.shape, dtype=torch.long)
        full[:, -1] = answers
        edge = f"0.{p}->1.{i}<k>"
        patched = path_patching(model, clean, corrupted, answer_logprob(mask, full), [edge])
    finally:
        module.train(was_training)
    return CircuitCheckpoint(
        step=step, loss=loss, accuracy=accuracy, previous_head=p,
        previous_score=float(prev[p]), induction_head=i, induction_score=float(ind[i]),
        k_composition=float(k), k_baseline=float(scores.baseline_for("k")),
        edge=edge, patching_effect=float(patched.scores[0]),
        clean_metric=float(patched.clean_metric), corrupted_metric=float(patched.corrupted_metric),
    )  # fmt: skip


def lr_factor(step: int, steps: int) -> float:
    """The sweep's schedule (train.py): linear warm-up over 5% of the steps, then cosine."""
    warmup = max(1, steps // 20)
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def train_and_measure(config: FormationConfig, progress: Progress | None = None) -> FormationRun:
    """Train ``config``'s model and measure it every ``config.every`` steps and at the end."""
    model = build_model(config)
    module = model.model
    module.train()
    opt = torch.optim.AdamW(module.parameters(), lr=config.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, config.steps))
    data = torch.Generator().manual_seed(config.seed)
    held_out = task_pairs(config.eval_size, config.seed + EVAL_SEED_OFFSET)
    checkpoints = []
    for step in range(1, config.steps + 1):
        batch = induction(config.batch_size, data)
        logits = last_logits(model, batch.tokens[..., 0])
        loss = F.cross_entropy(logits, batch.labels[:, 0])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % config.every == 0 or step == config.steps:
            checkpoints.append(
                measure(model, step, held_out, config.composition_samples, config.seed)
            )
        if progress is not None:
            progress(config.heads, step, config.steps)
    return FormationRun(
        heads=config.heads, seed=config.seed, steps=config.steps,
        model=f"GPT-2 (transformers) d_model {config.d_model}, {config.layers} layers, "
        f"{config.heads} heads, MLP {4 * config.d_model}, vocab {INDUCTION.vocab_sizes[0]}, "
        f"{INDUCTION.seq_len} positions", checkpoints=checkpoints,
    )  # fmt: skip


def induction_formation(
    heads: list[int], steps: int = 800, every: int = 50, seed: int = 0,
    progress: Progress | None = None,
    init_std: float = 0.02,
) -> InductionFormation:
    """One ``train_and_measure`` run per head count; every config is checked before any run."""
    if not heads:
        raise ValueError("heads must name at least one head count, got none")
    configs = [
        FormationConfig(heads=h, steps=steps, every=every, seed=seed, init_std=init_std)
        for h in heads
    ]
    runs = [train_and_measure(c, progress) for c in configs]
    return InductionFormation(task=INDUCTION.name, metric="logprob", runs=runs)


__all__ = [
    "FormationConfig",
    "build_model",
    "induction_formation",
    "measure",
    "task_pairs",
    "train_and_measure",
]
