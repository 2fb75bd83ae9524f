"""Circuits across an encoder-decoder's two streams on random tiny T5, BART, Marian and Whisper
in float64: the run protocol's runs from a block against the model's own forward, and exact path
patching and EAP of edges of every kind (encoder heads and MLPs into the cross-attention's key
and value inputs through the encoder's recomputed final norm, into later encoder blocks; decoder
heads into their own later blocks and the logits) against brute force (stream_brute_force.py).
Marian is BART's layer with no norm after the embeddings and a bias on its logits."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from stream_brute_force import BruteForce
from tiny_kinds import twins, whisper_features

from headlab.attention.interventions import intervene
from headlab.circuits.metrics import next_token_logprob
from headlab.circuits.stream_attribution import stream_attribution
from headlab.circuits.stream_graph import StreamBlockShape, StreamGraph, stream_graph_of
from headlab.circuits.stream_patching import StreamPatcher
from headlab.models.hf.encoder_decoder import EncoderDecoderModel
from headlab.models.run_protocol import cache

FAMILIES = ("t5", "bart", "marian", "whisper")


def _double(source):
    inputs = {k: v.double() if v.is_floating_point() else v for k, v in source.inputs.items()}
    return dataclasses.replace(source, inputs=inputs)


def _inputs(kind: str, model: EncoderDecoderModel, seed: int):
    g = torch.Generator().manual_seed(seed)
    if kind == "whisper":
        source = model.source_audio(
            [torch.randn(16000, generator=g) * 0.1 for _ in range(2)], 16000
        )
        source = _double(source)
    else:
        rows = torch.randint(3, 90, (2, 7), generator=g).tolist()
        source = model.source_ids([rows[0], rows[1][:5]])  # padded second source
    target = model.target_ids(torch.randint(3, 90, (2, 5), generator=g).tolist())
    return {"encoder": source, "decoder": target}


@pytest.fixture(scope="module", params=FAMILIES)
def case(request):
    return make_case(request.param)


def make_case(kind: str):
    """(kind, the tiny model in float64, clean and corrupted inputs, the metric)."""
    _, ours = twins(kind, seed=3)
    features = whisper_features() if kind == "whisper" else None
    model = EncoderDecoderModel(kind, ours, features=features)
    model.model.double()
    clean, corrupted = _inputs(kind, model, 11), _inputs(kind, model, 12)
    target = clean["decoder"]
    mask = target.attention_mask.clone()
    mask[:, -1] = False
    metric = next_token_logprob(target.input_ids, mask)
    return kind, model, clean, corrupted, metric


def test_blocks_are_both_streams_in_run_order(case):
    _, model, *_ = case
    blocks = model.blocks()
    streams = [b.stream for b in blocks]
    assert streams == sorted(streams, key=["encoder", "decoder"].index)
    assert streams.count("encoder") == len(model.attention_layers("encoder"))
    for block in blocks:
        assert (block.cross_attention is not None) == (block.stream == "decoder")


def test_run_from_each_block_equals_the_model_with_that_stream(case):
    """A run from block s with a changed stream equals the model's own forward with the same
    stream put at block s's input (a decoder start: the encoder's states from ``sources``)."""
    _, model, clean, _, _ = case
    kept = cache(model, clean)
    for start, block in enumerate(model.blocks()):
        g = torch.Generator().manual_seed(start)
        hidden = kept.resid[start] + 0.3 * torch.randn(
            kept.resid[start].shape, generator=g, dtype=torch.float64
        )
        with intervene(block, "resid_in", lambda t, h=hidden: h):
            want = model.run(clean["encoder"], clean["decoder"])
        got = model.unembed(
            model.run_blocks(clean, start=start, hidden=hidden, sources=kept.streams_out)
        )
        torch.testing.assert_close(got, want, rtol=0, atol=1e-10)


def test_a_decoder_start_reads_the_sources_through_the_final_norm(case):
    _, model, clean, _, _ = case
    kept = cache(model, clean)
    first = sum(b.stream == "encoder" for b in model.blocks())
    memory = kept.streams_out["encoder"] * 1.7 + 0.05  # the stream leaving the encoder
    with intervene(model.blocks()[first - 1], "resid_out", lambda t: memory):
        want = model.run(clean["encoder"], clean["decoder"])
    got = model.run_blocks(
        clean, start=first, hidden=kept.resid[first], sources={"encoder": memory}
    )
    torch.testing.assert_close(model.unembed(got), want, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="needs the encoder's states"):
        model.run_blocks(clean, start=first, hidden=kept.resid[first])


def _sampled(patcher: StreamPatcher) -> list:
    """One edge of each kind of receiver input (stream, kind, q/k/v/in), its sender of a kind
    (stream and kind) not taken yet where the receiver reads one: every kind of receiver and
    every kind of sender, in few edges."""
    graph, groups = patcher.graph, {}
    for edge in graph.edges:
        r = graph.node(edge.receiver)
        groups.setdefault((r.stream, r.kind, edge.input), []).append(edge)
    taken, chosen = set(), []
    for edges in groups.values():
        kinds = [(graph.node(e.sender).stream, graph.node(e.sender).kind) for e in edges]
        fresh = [i for i, k in enumerate(kinds) if k not in taken]
        at = fresh[0] if fresh else len(edges) - 1
        taken.add(kinds[at])
        chosen.append(edges[at])
    node = graph.node
    extra = [  # an encoder head and the embeddings into the keys and values; a head into the
        # cross-attention of its own block
        next(
            e
            for e in graph.edges
            if node(e.sender).kind == "head"
            and node(e.sender).stream == "encoder"
            and node(e.receiver).kind == "cross"
            and e.input == "k"
        ),
        [e for e in graph.edges if e.sender == "embed.encoder" and e.input == "v"][-1],
        next(
            e
            for e in graph.edges
            if node(e.receiver).kind == "cross"
            and e.input == "q"
            and node(e.sender).layer == node(e.receiver).layer
        ),
    ]
    return chosen + [e for e in extra if e not in chosen]


def test_path_patching_and_eap_equal_brute_force(case):
    _, model, clean, corrupted, metric = case
    patcher = StreamPatcher(model, clean, corrupted, metric)
    brute = BruteForce(model, clean, corrupted, metric)
    edges = _sampled(patcher)
    senders = {patcher.graph.node(e.sender).kind for e in edges}
    assert senders == {"embed", "head", "cross", "mlp"}
    kinds = {(patcher.graph.node(e.sender).stream, patcher.kind(e)[1]) for e in edges}
    assert {
        ("encoder", "cross_kv"),
        ("encoder", "self"),
        ("encoder", "mlp"),
        ("decoder", "cross_q"),
        ("decoder", "self"),
        ("decoder", "logits"),
    } <= kinds
    names = [e.name for e in edges]
    effects = patcher.effects(names, chunk=5)
    want = torch.tensor(
        [float(brute.effect(patcher.graph, e).detach()) for e in edges], dtype=torch.float64
    )
    scale = float(want.abs().max())
    assert scale > 1e-6  # the corruption moves the metric (random tiny BART: by ~1e-4)
    torch.testing.assert_close(effects, want, rtol=1e-9, atol=1e-9 * scale)
    scores = torch.tensor(
        stream_attribution(model, clean, corrupted, metric, names, patcher=patcher).scores
    )
    slopes = torch.tensor([brute.derivative(patcher.graph, e) for e in edges], dtype=torch.float64)
    slope_scale = float(slopes.abs().max())
    assert slope_scale > 1e-6
    # T5's layer norm takes its variance in float32: EAP's product of gradients and autograd
    # through the whole run agree to float32's rounding there, to float64's elsewhere
    torch.testing.assert_close(scores.double(), slopes, rtol=1e-6, atol=1e-7 * slope_scale)


def test_graph_of_one_block_each_by_hand():
    """Encoder: 2 heads, decoder: 1 self head, 1 cross head. Counted by hand: encoder heads
    3 x 2 x 1 (embed) = 6, encoder MLP 3 (embed, 0.0, 0.1); decoder self head 3 x 1 = 3; cross
    q: 2 (embed.decoder, 1.0), cross k, v: 2 x 4 encoder senders = 8; decoder MLP 3; logits 4."""
    graph = StreamGraph((StreamBlockShape("encoder", 2), StreamBlockShape("decoder", 1, 1)))
    assert len(graph.edges) == 6 + 3 + 3 + 2 + 8 + 3 + 4
    assert graph.edge("mlp.0->1.x0<k>").receiver == "1.x0"
    with pytest.raises(ValueError, match="only through the cross-attention's k and v"):
        graph.edge("0.1->1.0<q>")


def test_a_model_with_one_stream_is_refused():
    from toy_family import Toy

    with pytest.raises(ValueError, match="this graph reads an encoder and a decoder"):
        stream_graph_of(Toy.build())


def test_a_family_that_does_not_declare_its_blocks_is_refused_in_one_line(case, monkeypatch):
    from headlab.models.hf.seq2seq_blocks import seq2seq_blocks

    _, model, *_ = case
    monkeypatch.setattr(model.model, "_no_split_modules", [])
    for module in model.model.modules():  # nor the classes giving the stacks' hidden states
        if isinstance(getattr(module, "_can_record_outputs", None), dict):
            monkeypatch.setattr(module, "_can_record_outputs", {})
    with pytest.raises(ValueError, match="declares no block class") as error:
        seq2seq_blocks(model.name, model.model, model.layers)
    assert "\n" not in str(error.value)
    monkeypatch.setattr(model.model, "_no_split_modules", ["NoSuchLayer"])
    with pytest.raises(ValueError, match="in none of its declared blocks"):
        seq2seq_blocks(model.name, model.model, model.layers)
