"""What the score split shows on SmolLM2 (and the sweep's toys): the numbers of docs/circuits.md's
"Why a head attends where it does".

    python benchmarks/score_split_findings.py induction [--pairs 4]
    python benchmarks/score_split_findings.py sink
    python benchmarks/score_split_findings.py retrieval [--length 2048] [--head 20.6]
    python benchmarks/score_split_findings.py profiles [--model minilm]
    python benchmarks/score_split_findings.py toys [--steps 1200]

Each prints one JSON document (and the wall time and load average).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict

import torch

from headlab.circuits.score_agreement import pearson, ranks
from headlab.circuits.score_keys import KeySpec
from headlab.circuits.score_profiles import key_profiles
from headlab.circuits.score_sides import Sides
from headlab.circuits.score_split import split_scores

INDUCTION_HEADS = ((17, 3), (17, 4), (18, 6))  # the detector's top three (docs/circuits.md)
PREVIOUS_TOKEN = ("16.0", "17.8")
RETRIEVAL_HEAD = (20, 6)  # model roles' top retrieval head (docs/long-context.md)
PASSAGE = (
    "the lighthouse keeper counted seven ships before the storm reached the harbour and "
    "then wrote their names in a blue notebook that nobody ever read again"
)


def smollm2(name: str = "smollm2"):
    from headlab.models import load

    return load(name)


def spearman(a: list[float], b: list[float]) -> float:
    return pearson(ranks(torch.tensor(a)), ranks(torch.tensor(b)))


def induction(pairs: int) -> dict:
    from headlab.circuits.graph import group_name
    from headlab.circuits.patching import Patcher
    from headlab.circuits.run import CircuitRequest, prepare
    from headlab.circuits.task_performance import task_metric
    from headlab.circuits.tasks import TaskRequest

    model = smollm2()
    prepared = prepare(model, CircuitRequest(TaskRequest("induction", n_pairs=pairs)))
    task = prepared.pairs
    shares: dict[tuple, dict[str, float]] = {h: defaultdict(float) for h in INDUCTION_HEADS}
    counted = defaultdict(int)
    names: dict[int, list[str]] = {}
    with torch.no_grad():
        for b in range(task.clean.shape[0]):
            sides = Sides(model, task.clean[b : b + 1])
            queries = task.mask[b].nonzero().squeeze(-1).tolist()[-8:]
            for layer, head in INDUCTION_HEADS:
                result = split_scores(
                    sides, layer, head, queries, KeySpec.parse("induction"), sources=0
                )
                names[layer] = result.components
                for pair in result.pairs:  # each pair's terms as shares of its q.k
                    for name, value in zip(result.components, pair.key_marginal, strict=True):
                        shares[(layer, head)][name] += value / pair.raw
                    counted[(layer, head)] += 1
    patcher = Patcher(model, task.clean, task.corrupted, task_metric(task))
    out = {"pairs": pairs, "heads": {}}
    effects_of: dict[str, dict[str, float]] = {}
    for layer, head in INDUCTION_HEADS:
        group = group_name(layer, head // 3)
        senders = [n for n in names[layer] if n not in ("out-bias", "qk-bias")]
        if group not in effects_of:
            edges = [f"{s}->{group}<k>" for s in senders]
            with torch.no_grad():
                found = patcher.effects(edges)
            effects_of[group] = dict(zip(senders, found.tolist(), strict=True))
        mean = {n: shares[(layer, head)][n] / counted[(layer, head)] for n in senders}
        effect = effects_of[group]
        top = sorted(senders, key=lambda n: -mean[n])[:6]
        by_effect = sorted(senders, key=lambda n: effect[n])[:6]
        out["heads"][f"{layer}.{head}"] = {
            "group": group,
            "queries": counted[(layer, head)],
            "top_key_side": [[n, round(mean[n], 4)] for n in top],
            "top_k_edge_effect": [[n, round(effect[n], 4)] for n in by_effect],
            "previous_token_ranks": {
                p: 1 + sorted(senders, key=lambda n: -mean[n]).index(p)
                for p in PREVIOUS_TOKEN
                if p in senders
            },
            "spearman_share_vs_minus_effect": spearman(
                [mean[n] for n in senders], [-effect[n] for n in senders]
            ),
            "spearman_abs": spearman(
                [abs(mean[n]) for n in senders], [abs(effect[n]) for n in senders]
            ),
            "senders": len(senders),
        }
    out["clean_metric"], out["corrupted_metric"] = patcher.clean_value, patcher.corrupted_value
    return out


def natural_text(model, words: int = 160) -> list[int]:
    from pathlib import Path

    text = " ".join(Path(__file__).parents[1].joinpath("README.md").read_text().split()[:words])
    return model.encode(text)


def sink() -> dict:
    model = smollm2()
    ids = natural_text(model)
    sides = Sides(model, torch.tensor([ids]))
    queries = list(range(len(ids) - 8, len(ids)))
    out = {"tokens": len(ids), "first_token": model.decode(ids[:1]), "layers": {}}
    with torch.no_grad():
        for layer in (4, 14, 24):
            total: dict[str, float] = defaultdict(float)
            other: dict[str, float] = defaultdict(float)
            weights = []
            for head in range(model.heads_per_layer[layer]):
                bos = split_scores(sides, layer, head, queries, KeySpec.parse("bos"), sources=0)
                rest = split_scores(
                    sides, layer, head, queries, KeySpec.parse("previous"), sources=0
                )
                for result, into in ((bos, total), (rest, other)):
                    for pair in result.pairs:
                        for name, value in zip(result.components, pair.key_marginal, strict=True):
                            into[name] += value / len(result.pairs) / 9
                gaps = [p.score - r.score for p, r in zip(bos.pairs, rest.pairs, strict=True)]
                weights.append(sum(gaps) / len(gaps))
            top = sorted(total, key=lambda n: -abs(total[n]))[:6]
            out["layers"][layer] = {
                "bos_minus_previous_score": round(sum(weights) / len(weights), 3),
                "bos_key_side_top": [[n, round(total[n], 3), round(other[n], 3)] for n in top],
                "bos_q_dot_k": round(sum(total.values()), 3),
                "previous_q_dot_k": round(sum(other.values()), 3),
            }
    return out


def retrieval(length: int, chosen: tuple[int, int] = RETRIEVAL_HEAD) -> dict:
    model = smollm2()
    filler = natural_text(model, 4000)
    passage = (
        model.encode(" " + PASSAGE)[1:]
        if model.encode("a")[0] != model.encode("a")[-1]
        else model.encode(" " + PASSAGE)
    )
    body = length - 2 * len(passage) - 2
    reps = (filler * (1 + body // len(filler)))[1 : body + 1]
    at = len(reps) // 10
    ids = [filler[0], *reps[:at], *passage, *reps[at:], *passage][:length]
    start = len(ids) - len(passage)
    queries = list(range(start + 2, len(ids), 3))
    layer, head = chosen
    with torch.no_grad():
        sides = Sides(model, torch.tensor([ids]))
        result = split_scores(sides, layer, head, queries, KeySpec.parse("induction"), sources=2)
        attended = split_scores(sides, layer, head, queries, KeySpec.parse("attended"), sources=0)
    mean: dict[str, float] = defaultdict(float)
    for pair in result.pairs:
        for name, value in zip(result.components, pair.key_marginal, strict=True):
            mean[name] += value / len(result.pairs)
    top = sorted(mean, key=lambda n: -abs(mean[n]))[:8]
    sources = defaultdict(float)
    for pair in result.pairs:
        for split in pair.sources:
            for p, v in zip(split.positions, split.values, strict=True):
                sources[(split.component, p - pair.key)] += v / len(result.pairs)
    top_sources = sorted(sources, key=lambda k: -abs(sources[k]))[:6]
    return {
        "head": f"{layer}.{head}",
        "length": len(ids),
        "passage_tokens": len(passage),
        "queries": len(queries),
        "hits": sum(a.key == p.key for a, p in zip(attended.pairs, result.pairs, strict=True)),
        "induction_q_dot_k": round(sum(p.raw for p in result.pairs) / len(result.pairs), 3),
        "key_side_top": [[n, round(mean[n], 3)] for n in top],
        "sources_by_offset_from_key": [[c, o, round(sources[(c, o)], 3)] for c, o in top_sources],
    }


def profiles(name: str) -> dict:
    model = smollm2(name)
    ids = natural_text(model, 100)
    sides = Sides(model, torch.tensor([ids]))
    queries = list(range(len(ids) - 16, len(ids)))
    out, tops = {}, {}
    with torch.no_grad():
        for layer in range(1, model.num_layers):
            found = key_profiles(sides, layer, queries)
            out[layer] = [round(found["within"], 3), round(found["to_one_head"], 3)]
            heads = torch.tensor(found["heads"])  # (head, component + 1), unit rows
            names = found["components"]
            mean = heads.mean(0)
            tops[layer] = {
                "mean_profile_top": [
                    [names[c], round(float(mean[c]), 3)] for c in mean.abs().topk(3).indices
                ],
                "each_head_top": [names[int(c)] for c in heads.abs().argmax(-1)],
            }
    return {
        "model": name,
        "tokens": len(ids),
        "per_layer_within_and_to_one_head": out,
        "per_layer_components": tops,
    }


def toys(steps: int) -> dict:
    from headlab.experiments.induction_circuit import FormationRequest, task_pairs
    from headlab.experiments.sweep_gpt2 import as_transformers
    from headlab.experiments.train import run_one

    out = {}
    for heads in (1, 8):
        final = {}

        def keep(step, tiny, final=final):
            final["tiny"] = tiny

        run_one(
            FormationRequest(heads=heads, steps=steps, every=steps).run_config(), on_checkpoint=keep
        )
        model = as_transformers(final["tiny"])
        model.model.double()
        clean = task_pairs(8, 123)[0]
        layers = defaultdict(list)
        with torch.no_grad():
            for b in range(clean.shape[0]):
                sides = Sides(model, clean[b : b + 1])
                length = clean.shape[1]
                for layer in range(model.num_layers):
                    found = key_profiles(sides, layer, list(range(length // 2, length)))
                    layers[layer].append((found["within"], found["to_one_head"]))
        out[f"h={heads}"] = {
            layer: [
                round(sum(v[0] for v in got) / len(got), 3),
                round(sum(v[1] for v in got) / len(got), 3),
            ]
            for layer, got in layers.items()
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["induction", "sink", "retrieval", "profiles", "toys"])
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--model", default="smollm2", help="profiles: smollm2 or minilm")
    parser.add_argument("--head", default="20.6", help="retrieval: the head, layer.head")
    args = parser.parse_args()
    torch.set_num_threads(2)
    start = time.perf_counter()
    found = {
        "induction": lambda: induction(args.pairs),
        "sink": sink,
        "retrieval": lambda: retrieval(args.length, tuple(int(x) for x in args.head.split("."))),
        "profiles": lambda: profiles(args.model),
        "toys": lambda: toys(args.steps),
    }[args.what]()
    found["wall_s"] = round(time.perf_counter() - start, 1)
    found["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(found, indent=1, default=str))


if __name__ == "__main__":
    main()
