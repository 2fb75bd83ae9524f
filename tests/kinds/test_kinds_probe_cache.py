"""Encoder-decoders and image models keep their probe in headlab's cache as text families do
(models/hf/probe_cache.py): a second load reads the entry, checked by a probe of one layer per
class on the kind's own inputs, and finds what a fresh probe finds; an entry that does not fit
is discarded with one notice and probed again; a model in memory is always probed. An
encoder-decoder's check runs two forwards that stop after a first block (the encoder's on the
source; the decoder's on given encoder states): nothing else runs, and the kinds it sorts the
layers into are those a whole forward's lengths give (``attention_kinds``)."""

from __future__ import annotations

import json

import pytest
from tiny_kinds import ENCODER_DECODERS, VISION, saved, twins

from headlab.models.hf import probe, probe_cache
from headlab.models.hf.attention_kinds import attention_kinds
from headlab.models.hf.encoder_decoder import EncoderDecoderModel
from headlab.models.hf.kinds_loader import load_encoder_decoder, load_vision
from headlab.models.hf.probe_cache import FOLDER
from headlab.notices import CacheNotice

KINDS = ("t5", "bart", "whisper", "vit", "dinov2_registers")


def _load(kind: str, folder):
    return (load_vision if kind in VISION else load_encoder_decoder)(folder)


def _facts(model) -> list:
    layers = (
        model.layers
        if isinstance(model.layers, list)
        else [layer for kind in sorted(model.layers) for layer in model.layers[kind]]
    )

    def rows(found):
        return None if found is None or isinstance(found, str) else (found.path, found.rows)

    return [
        (
            layer.path,
            layer.num_heads,
            layer.num_kv_heads,
            layer.head_dim,
            rows(layer.output),
            rows(layer.query),
            rows(layer.key),
            rows(layer.value),
        )
        for layer in layers
    ]


def _no_probe(*args, **kwargs):
    raise AssertionError("probed although the entry is cached")


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_load_reads_the_entry_and_finds_the_same_layers(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("HEADLAB_CACHE", str(tmp_path / "cache"))
    folder = saved(kind, tmp_path / kind)
    first = _facts(_load(kind, folder))  # probes and writes
    (entry,) = (tmp_path / "cache" / FOLDER).glob("*.json")
    with monkeypatch.context() as patched:
        patched.setattr(probe_cache, "probe", _no_probe)
        assert _facts(_load(kind, folder)) == first
    document = json.loads(entry.read_text())
    claims = [t[part] for t in document["templates"] for part in ("query", "key", "value")]
    claim = next(c for c in claims if c is not None and len(c["offsets"]) > 1)
    claim["offsets"] = claim["offsets"][::-1]  # heads swapped
    entry.write_text(json.dumps(document))
    with pytest.warns(CacheNotice, match="did not pass its check"):
        assert _facts(_load(kind, folder)) == first


@pytest.mark.parametrize("kind", ENCODER_DECODERS[:1])
def test_a_model_in_memory_is_always_probed(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("HEADLAB_CACHE", str(tmp_path / "cache"))
    _, model = twins(kind)
    EncoderDecoderModel(kind, model)
    assert not (tmp_path / "cache" / FOLDER).exists()


@pytest.mark.parametrize("kind", ["t5", "whisper"])
def test_a_cached_check_runs_each_stream_to_its_first_block(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("HEADLAB_CACHE", str(tmp_path / "cache"))
    folder = saved(kind, tmp_path / kind)
    _load(kind, folder)  # probes and writes
    calls = []
    first_calls = probe._first_calls

    def counted(recorder, family, lengths=None):
        calls.append(len(recorder.calls))
        return first_calls(recorder, family, lengths)

    with monkeypatch.context() as patched:
        patched.setattr(probe_cache, "probe", _no_probe)
        patched.setattr(probe, "_first_calls", counted)
        model = _load(kind, folder)
    assert calls == [1, 2]  # the encoder's first self-attention; the decoder's self and cross
    inputs, source_len, target_len = model._probe_inputs()
    kinds = attention_kinds(model.model, inputs, source_len, target_len)
    for name, layers in model.layers.items():
        assert layers and all(kinds[id(layer.module)] == name for layer in layers)
