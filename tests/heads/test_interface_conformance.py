"""Every analysis runs on a third model family made of the interface alone.

``Toy`` below is a tiny causal language model written for this test: its own attention module
(not headlab's ``MultiHeadAttention``; it calls the kernel, as any family behind headlab's
registered transformers function does), its own tokenizer, its own views and edits. It
implements ``HeadModel`` and nothing more, so each analysis that runs on it uses nothing but the
interface. Its statistics are checked against its recorded weights.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import Tensor, nn

from headlab.attention.functional import entropy, merge_heads
from headlab.attention.kernel import attend
from headlab.attention.mask_spec import MaskSpec
from headlab.attention.sites import Sites
from headlab.heads import (
    collapse_heads,
    detect_heads,
    head_importance,
    head_statistics,
    prune_by_importance,
)
from headlab.heads.ablation import ablation_effect
from headlab.heads.long_context import long_text_statistics
from headlab.heads.patterns import patterns_by_length
from headlab.heads.redundancy import measure_redundancy
from headlab.heads.text_attention import model_text_attention
from headlab.heads.tracing import attention_weights
from headlab.models.interface import (
    AttentionLayer,
    HeadMask,
    HeadModel,
    TokenBatch,
    layer_masks,
)
from headlab.models.objectives import next_token_loss

E, H, D, LAYERS, VOCAB = 14, 4, 5, 2, 29  # distinct sizes; H * D = 20 != E


def _linear(weight: Tensor) -> nn.Linear:
    """A bias-free Linear holding a copy of ``weight`` (out, in), also with no rows."""
    lin = nn.Linear(1, 1, bias=False)
    lin.weight = nn.Parameter(weight.detach().clone())
    lin.out_features, lin.in_features = weight.shape
    return lin


class ToyAttention(nn.Module):
    """Causal self-attention with separate q/k/v/o maps, through headlab's kernel."""

    def __init__(self, q: nn.Linear, k: nn.Linear, v: nn.Linear, o: nn.Linear, view=None):
        super().__init__()
        self.q, self.k, self.v, self.o = q, k, v, o
        self.num_heads = q.out_features // D if view is None else view
        self.num_kv_heads = self.num_heads
        self.head_dim = D if view is None else D * (q.out_features // D) // view
        self.embed_dim = E
        self.view = view
        self.sites = Sites()

    def query_key_weights(self) -> tuple[Tensor, Tensor]:
        if self.view is not None:
            raise ValueError("a view has no weights of its own")
        return self.q.weight, self.k.weight

    def forward(self, x: Tensor, padding: Tensor, scale: Tensor | None) -> Tensor:
        batch, pos, _ = x.shape
        heads = self.q.out_features // D
        if heads == 0:  # every head removed
            return torch.zeros_like(x)

        def split(t: Tensor) -> Tensor:
            return t.view(batch, pos, heads, D).transpose(1, 2)  # (batch, head, pos, D)

        statistics = self.sites.statistics
        if statistics is not None:
            statistics = dataclasses.replace(statistics, output_weight=self.o.weight)
        run = attend(
            split(self.q(x)),
            split(self.k(x)),
            split(self.v(x)),
            MaskSpec(causal=True, key_padding=padding),
            sites=self.sites,
            head_scale=None if scale is None else scale.view(-1, heads, 1, 1),
            head_view=self.view,
            statistics=statistics,
        )
        return self.o(merge_heads(run.head_out))


class Toy:
    """A causal LM: embeddings, residual attention layers, tied output. Whitespace words."""

    name = "toy"
    causal = True
    objective_kind = "next-token"
    first_token = "start"
    max_positions = 40
    output_width = VOCAB

    def __init__(self, layers: list[ToyAttention], embed: nn.Embedding) -> None:
        self.layers, self.embed = layers, embed

    @classmethod
    def build(cls, seed: int = 0) -> Toy:
        torch.manual_seed(seed)

        def linear(i, o):
            return nn.Linear(i, o, bias=False)

        layers = [
            ToyAttention(linear(E, H * D), linear(E, H * D), linear(E, H * D), linear(H * D, E))
            for _ in range(LAYERS)
        ]
        return cls(layers, nn.Embedding(VOCAB, E))

    # -------------------------------------------------------------- the interface
    num_layers = property(lambda self: len(self.layers))
    heads_per_layer = property(lambda self: [a.num_heads for a in self.layers])
    kv_heads_per_layer = property(lambda self: [a.num_kv_heads for a in self.layers])

    def parameters(self):
        seen = {}
        for module in (self.embed, *self.layers):
            for p in module.parameters():
                seen[id(p)] = p
        return iter(seen.values())

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def attention_layers(self) -> list[AttentionLayer]:
        return self.layers

    def tokenize(self, texts: list[str], max_length: int | None = None) -> TokenBatch:
        limit = max_length or self.max_positions
        if not 1 <= limit <= self.max_positions:
            raise ValueError(f"max_length must be between 1 and {self.max_positions}")
        words = [t.split()[:limit] for t in texts]
        pos = max(len(w) for w in words)
        ids = torch.zeros(len(texts), pos, dtype=torch.long)
        mask = torch.zeros(len(texts), pos, dtype=torch.bool)
        for row, w in enumerate(words):
            ids[row, : len(w)] = torch.tensor([sum(map(ord, x)) % VOCAB for x in w])
            mask[row, : len(w)] = True
        return TokenBatch(ids, mask, words)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def run(self, batch: TokenBatch, head_mask: HeadMask = None) -> Tensor:
        x = self.embed(batch.input_ids)
        for layer, scale in zip(self.layers, layer_masks(head_mask, self.num_layers), strict=True):
            x = x + layer(x, ~batch.attention_mask, scale)
        return x @ self.embed.weight.T  # (batch, pos, vocab)

    def objective(self, texts, head_mask=None, max_length=None) -> Tensor:
        batch = self.tokenize(texts, max_length)
        return next_token_loss(self.run(batch, head_mask), batch)

    def special_positions(self, batch: TokenBatch) -> dict[str, Tensor]:
        return {
            "start": torch.zeros(len(batch.tokens), dtype=torch.long),
            "last": batch.attention_mask.sum(dim=1) - 1,
        }

    def _with(self, replace: dict[int, ToyAttention]) -> Toy:
        return Toy([replace.get(i, a) for i, a in enumerate(self.layers)], self.embed)

    def with_head_view(self, num_heads, layers=None) -> Toy:
        chosen = range(self.num_layers) if layers is None else layers
        if any(H % num_heads for _ in chosen):
            raise ValueError(f"num_heads must divide {H}, got {num_heads}")
        a = self.layers
        return self._with(
            {i: ToyAttention(a[i].q, a[i].k, a[i].v, a[i].o, num_heads) for i in chosen}
        )

    def without_heads(self, heads) -> Toy:
        replace = {}
        for i, removed in heads.items():
            old = self.layers[i]
            keep = [h for h in range(old.num_heads) if h not in set(removed)]
            rows = [r for h in keep for r in range(h * D, (h + 1) * D)]
            new = ToyAttention(
                *(_linear(getattr(old, name).weight[rows]) for name in ("q", "k", "v")),
                _linear(old.o.weight[:, rows]),
            )
            replace[i] = new
        return self._with(replace)

    def with_query_key_weights(self, weights) -> Toy:
        replace = {}
        for i, (w_q, w_k) in weights.items():
            new = copy.deepcopy(self.layers[i])
            with torch.no_grad():
                new.q.weight.copy_(w_q)
                new.k.weight.copy_(w_k)
            new.sites = Sites()
            replace[i] = new
        return self._with(replace)


TEXTS = [" ".join(f"w{(5 * i + 3 * j) % 23}" for j in range(6 + i % 9)) for i in range(12)]


@pytest.fixture(scope="module")
def toy() -> Toy:
    return Toy.build()


def test_the_toy_is_a_head_model(toy):
    assert isinstance(toy, HeadModel)
    assert all(isinstance(a, AttentionLayer) for a in toy.attention_layers())


def test_statistics_equal_the_recorded_weights(toy):
    result = head_statistics(toy, TEXTS, max_length=20, detector_length=6)
    assert result.first_token == "start"
    assert set(result.detectors) == {"previous_token", "duplicate_token", "induction"}
    batch = toy.tokenize(TEXTS, 20)
    _, weights = attention_weights(toy, batch)
    real = batch.attention_mask.double()[:, None, :]
    for layer, w in enumerate(weights):
        w = w.double()
        want = (entropy(w) * real).sum(dim=(0, 2)) / real.sum()
        got = torch.tensor(result.metrics["entropy"][layer], dtype=torch.float64)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        first = (w[..., 0] * real).sum(dim=(0, 2)) / real.sum()
        got = torch.tensor(result.metrics["start"][layer], dtype=torch.float64)
        torch.testing.assert_close(got, first, atol=1e-5, rtol=1e-5)


def test_every_analysis_runs_on_the_interface_alone(toy):
    detect_heads(toy, torch.arange(VOCAB), 5)
    long = long_text_statistics(toy, " ".join(TEXTS), max_tokens=35)
    assert long.result().findings.heads == LAYERS * H
    importance = head_importance(toy, TEXTS, batch_size=6, max_length=16)
    assert len(importance.ranking()) == LAYERS * H
    for mode in ("zero", "mean", "resample"):
        effect = ablation_effect(
            toy, TEXTS, [(0, 1), (1, 3)], mode=mode, batch_size=6, max_length=16
        )
        assert effect.ablated != effect.baseline
    collapse = collapse_heads(toy, TEXTS, (1, 2, 4), max_length=16)
    full = next(r for r in collapse.all_layers if r.num_heads == H)
    assert full.measures["next_token_agreement"] == 1.0
    pruned = prune_by_importance(toy, TEXTS, fractions=(0.0, 0.5, 1.0), max_length=16)
    counts = [s.params for s in pruned.steps if s.order == "importance"]
    assert counts[0] > counts[1] > counts[2]
    redundancy = measure_redundancy(toy, TEXTS, ranks=(E, 3), max_length=16, batch_size=6)
    original = next(p for p in redundancy.curve if p.original).measures["perplexity"]
    exact = next(p for p in redundancy.curve if p.rank == E and not p.original)
    assert exact.measures["perplexity"] == pytest.approx(original, rel=1e-5)
    text = model_text_attention(toy, TEXTS[3])
    assert [v.name for v in text.views] == ["4 heads", "1 head, same weights"]
    patterns = patterns_by_length(toy, TEXTS, (6,), count=3)
    assert patterns[6].shape == (3, 6, 6)


#: Words of the tiny transformers checkpoints' vocabulary (tests/models/hf_families.py).
HF_TEXTS = [" ".join(f"w{(5 * i + 3 * j) % 97 + 1}" for j in range(6 + i % 9)) for i in range(12)]


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_every_analysis_runs_on_a_transformers_model(name, hf_loaded):
    """The same analyses on ``TransformersModel`` (a tiny Llama: 6 query heads on 2 K/V heads;
    a tiny BERT encoder), which implements the interface for any transformers family."""
    from headlab.heads.kv_budget import kv_budget
    from headlab.models.hf import TransformersModel

    model = hf_loaded(name)
    assert isinstance(model, TransformersModel) and isinstance(model, HeadModel)
    assert all(isinstance(a, AttentionLayer) for a in model.attention_layers())
    layers, heads = model.num_layers, sum(model.heads_per_layer)
    result = head_statistics(model, HF_TEXTS, max_length=20, detector_length=6)
    assert result.first_token == "first" and len(result.metrics["entropy"]) == layers
    assert bool(result.detectors) == model.causal
    detect_heads(model, torch.arange(1, 90), 5)
    long = long_text_statistics(model, " ".join(HF_TEXTS), max_tokens=60)
    assert long.result().findings.heads == heads
    importance = head_importance(model, HF_TEXTS, batch_size=6, max_length=16)
    assert len(importance.ranking()) == heads
    for mode in ("zero", "mean", "resample"):
        effect = ablation_effect(
            model, HF_TEXTS, [(0, 1), (1, 2)], mode=mode, batch_size=6, max_length=16
        )
        assert effect.ablated != effect.baseline
    collapse = collapse_heads(model, HF_TEXTS, max_length=16)
    full = next(r for r in collapse.all_layers if r.num_heads == model.heads_per_layer[0])
    assert full.measures.get("next_token_agreement", full.measures.get("nn_agreement")) == 1.0
    pruned = prune_by_importance(model, HF_TEXTS, fractions=(0.0, 0.5, 1.0), max_length=16)
    counts = [s.params for s in pruned.steps if s.order == "importance"]
    assert counts[0] > counts[1] > counts[2]
    embed = model.attention_layers()[0].embed_dim
    redundancy = measure_redundancy(model, HF_TEXTS, ranks=(embed, 3), max_length=16,
                                    batch_size=6)  # fmt: skip
    original = next(p for p in redundancy.curve if p.original).measures
    exact = next(p for p in redundancy.curve if p.rank == embed and not p.original).measures
    assert exact == pytest.approx(original, rel=1e-5)
    text = model_text_attention(model, HF_TEXTS[3])
    assert [v.name for v in text.views] == [f"{model.heads_per_layer[0]} heads",
                                            "1 head, same weights"]  # fmt: skip
    if model.causal:
        patterns = patterns_by_length(model, HF_TEXTS, (6,), count=3)
        assert patterns[6].shape == (3, 6, 6)
        passage = " ".join(f"w{(11 * i) % 97 + 1}" for i in range(10))
        filler = " ".join(f"w{(3 * i + 1) % 89 + 1}" for i in range(20))
        repeat = f"w1 {passage} {filler} {passage}"
        budget = kv_budget(model, budgets=(0.5,), sinks=2, window=5, seeds=1,
                           calibration_text=repeat, evaluation_text=repeat)  # fmt: skip
        assert budget.to_dict()
