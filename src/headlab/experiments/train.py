"""``run_one``: one training run as a pure function of its RunConfig.

Same config -> same result (seeded torch and numpy, one thread, deterministic data), so a run can
execute in any process or on any machine of a Ray cluster.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from headlab.analysis.params import parameter_count
from headlab.attention.one_thread import one_torch_thread
from headlab.experiments.sweep_tasks import Batch, generate, get_task
from headlab.experiments.tiny_transformer import TinyTransformer, attention_entropy
from headlab.results.run_config import RunConfig
from headlab.results.training_run import EvalPoint, RunResult

# Evaluation data come from a seed range that training never draws from.
EVAL_SEED_OFFSET = 1_000_003


def _evaluate(model: TinyTransformer, batch: Batch) -> tuple[EvalPoint, list[float]]:
    model.eval()
    with torch.no_grad():
        logits, weights = model(batch.tokens, need_weights=True)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten()).item()
        accuracy = (logits.argmax(-1) == batch.labels).double().mean().item()
    model.train()
    return EvalPoint(step=0, loss=loss, accuracy=accuracy), attention_entropy(
        weights or [], model.spec.readout
    )


def run_one(
    config: RunConfig,
    on_eval: Callable[[str, int, float], None] | None = None,
    on_checkpoint: Callable[[int, TinyTransformer], None] | None = None,
) -> RunResult:
    """Train ``config``'s model from scratch; ``on_eval(run_id, step, loss)`` reports progress,
    ``on_checkpoint(step, model)`` sees the model at every evaluation (it must not change it).

    AdamW with a linear warm-up of 5% of the steps and cosine decay; cross-entropy over all
    outputs; evaluation on eval_size fixed held-out examples.
    """
    start = time.perf_counter()
    with one_torch_thread():  # runs are parallel across processes, not inside one
        torch.manual_seed(config.seed)
        np.random.seed(config.seed)
        random.seed(config.seed)
        spec, make_batch = get_task(config.task)
        model = TinyTransformer(config, spec)
        opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
        warmup = max(1, config.steps // 20)

        def lr_factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            return 0.5 * (1 + np.cos(np.pi * (step - warmup) / max(1, config.steps - warmup)))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor)
        data = torch.Generator().manual_seed(config.seed)
        eval_batch = generate(config.task, config.eval_size, config.seed + EVAL_SEED_OFFSET)
        curve: list[EvalPoint] = []
        entropy: list[float] = []
        for step in range(1, config.steps + 1):
            batch = make_batch(config.batch_size, data)
            logits, _ = model(batch.tokens)
            loss = F.cross_entropy(logits.flatten(0, 1), batch.labels.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if step % config.eval_every == 0 or step == config.steps:
                point, entropy = _evaluate(model, eval_batch)
                entropy = entropy if config.attention == "plain" else []
                curve.append(EvalPoint(step=step, loss=point.loss, accuracy=point.accuracy))
                if on_eval is not None:
                    on_eval(config.run_id, step, point.loss)
                if on_checkpoint is not None:
                    on_checkpoint(step, model)
        return RunResult(
            config=config,
            curve=curve,
            head_entropy=entropy,
            params=parameter_count(model),
            seconds=round(time.perf_counter() - start, 3),
        )
