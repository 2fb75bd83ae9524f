"""The probe's findings kept in the cache (models/hf/probe_cache.py): read back, they are what a
fresh probe finds (every field, the same modules), on tiny random models of families with
separate, fused and interleaved projections, QK-norm, post-norm and hybrid layers; an entry that
does not fit the model, or cannot be read, is probed again; an unwritable cache only costs the
probe; a load reads the entry instead of probing."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from hf_families import build, write_family

from headlab.models.hf import load_transformers, probe_cache
from headlab.models.hf import probe as probe_module
from headlab.models.hf.adapter import TransformersModel
from headlab.models.hf.layer import HFAttentionLayer
from headlab.models.hf.probe import probe
from headlab.models.hf.probe_cache import FOLDER, probe_key, probed_layers
from headlab.models.hf.registry import register
from headlab.notices import CacheNotice

FAMILIES = ["llama", "qwen3", "gemma2", "phi3", "olmo2", "gpt2", "gpt_neox", "bert", "jamba"]


def _on_headlab(name: str):
    model = build(name)
    model.set_attn_implementation(register())
    return model


def _facts(layer: HFAttentionLayer) -> dict:
    def projection(found):
        if found is None or isinstance(found, str):
            return found
        return (found.path, id(found.module), found.transposed, found.rows)

    norm = layer.input_norm
    return {
        "module": id(layer.module),
        "sizes": (
            layer.path,
            layer.family,
            layer.num_heads,
            layer.num_kv_heads,
            layer.head_dim,
            layer.embed_dim,
        ),
        **{name: projection(getattr(layer, name)) for name in ("output", "query", "key", "value")},
        "norm": None if norm is None else (norm.path, id(norm.module)),
    }


def _entries(root: Path) -> list[Path]:
    return sorted((root / FOLDER).glob("*.json"))


def _no_probe(*args, **kwargs):
    raise AssertionError("probed although the entry is cached")


@pytest.mark.parametrize("name", FAMILIES)
def test_a_cached_entry_gives_what_the_probe_finds(name, tmp_path, monkeypatch) -> None:
    model = _on_headlab(name)
    want = [_facts(layer) for layer in probe(model, name)]
    first = probed_layers(model, name, root=tmp_path)  # probes and writes
    assert len(_entries(tmp_path)) == 1
    monkeypatch.setattr(probe_cache, "probe", _no_probe)
    second = probed_layers(model, name, root=tmp_path)  # reads
    assert [_facts(layer) for layer in first] == want
    assert [_facts(layer) for layer in second] == want


def _first(entry: dict) -> dict:
    return entry["templates"][0]


def _rows_beyond_the_weight(entry: dict) -> None:
    _first(entry)["query"]["offsets"][-1] = 10_000


def _a_path_that_is_not_there(entry: dict) -> None:
    _first(entry)["query"]["path"] = [0, "q_nowhere"]


def _another_module(entry: dict) -> None:
    _first(entry)["key"]["path"] = [0, "v_proj"]


def _another_layout(entry: dict) -> None:
    _first(entry)["query"]["transposed"] = True


def _heads_swapped(entry: dict) -> None:
    offsets = _first(entry)["query"]["offsets"]
    offsets[0], offsets[1] = offsets[1], offsets[0]


def _two_heads_on_one_slice(entry: dict) -> None:
    offsets = _first(entry)["query"]["offsets"]
    offsets[1] = offsets[0]


def _a_class_not_held(entry: dict) -> None:
    entry["templates"].append({**_first(entry), "class": "GPT2Attention"})


def _a_head_too_few(entry: dict) -> None:
    _first(entry)["value"]["offsets"].pop()


def _another_size(entry: dict) -> None:
    _first(entry)["num_kv_heads"] = 3


def _another_norm(entry: dict) -> None:
    _first(entry)["input_norm"] = [1, "post_attention_layernorm"]


def _no_output(entry: dict) -> None:
    _first(entry)["output"] = None


def _not_json(entry: dict) -> str:
    return "{ not json"


def _keys_missing(entry: dict) -> None:
    del _first(entry)["query"]


def _a_huge_number(entry: dict) -> None:
    _first(entry)["query"]["offsets"][0] = 10**30


def _nested_without_end(entry: dict) -> str:
    return "[" * 200_000


def _wrong_types(entry: dict) -> None:
    _first(entry)["query"]["transposed"] = "no"
    _first(entry)["key"]["offsets"] = ["0", "8"]


def _a_list(entry: dict) -> str:
    return json.dumps(entry["templates"])


DAMAGES = [
    _rows_beyond_the_weight,
    _a_path_that_is_not_there,
    _another_module,
    _another_layout,
    _heads_swapped,
    _two_heads_on_one_slice,
    _a_class_not_held,
    _a_head_too_few,
    _another_size,
    _another_norm,
    _no_output,
    _not_json,
    _keys_missing,
    _a_huge_number,
    _nested_without_end,
    _wrong_types,
    _a_list,
]


@pytest.mark.parametrize("damage", DAMAGES)
def test_an_entry_that_fails_its_check_is_discarded_and_rebuilt(damage, tmp_path: Path) -> None:
    """Each edit fails the reader or the check on the probe's forward: the layers are what a
    fresh probe finds (heads 0 and 1 swapped would swap their composition scores), one notice
    says so, and the entry is written again."""
    model = _on_headlab("llama")
    want = [_facts(layer) for layer in probe(model, "llama")]
    probed_layers(model, "llama", root=tmp_path)
    (path,) = _entries(tmp_path)
    entry = json.loads(path.read_text())
    text = damage(entry)
    path.write_text(text if isinstance(text, str) else json.dumps(entry))
    with pytest.warns(CacheNotice) as notices:
        assert [_facts(layer) for layer in probed_layers(model, "llama", root=tmp_path)] == want
    assert len(notices) == 1 and str(path) in str(notices[0].message)
    rewritten = json.loads(path.read_text())  # rewritten with what the probe found
    assert _first(rewritten)["query"]["offsets"] == [0, 8, 16, 24, 32, 40]
    assert not list((tmp_path / FOLDER).glob(".tmp-*"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewritten entry passes: no notice
        probed_layers(model, "llama", root=tmp_path)


@pytest.mark.parametrize("name", ["llama", "phi3", "gpt_neox", "gpt2", "bert", "jamba"])
def test_an_entry_that_passes_is_checked_by_a_probe_of_one_layer(name, tmp_path, monkeypatch):
    """The claims are checked on a forward stopped after the first attention layer (one call
    of the attention function); the search (``_slice``) never runs."""
    model = _on_headlab(name)
    want = [_facts(layer) for layer in probe(model, name)]
    probed_layers(model, name, root=tmp_path)
    calls = []
    first_calls = probe_module._first_calls

    def counted(recorder, family, lengths=None):
        calls.append(len(recorder.calls))
        return first_calls(recorder, family, lengths)

    with monkeypatch.context() as patch:
        patch.setattr(probe_module, "_slice", _no_probe)
        patch.setattr(probe_module, "_first_calls", counted)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert [_facts(layer) for layer in probed_layers(model, name, root=tmp_path)] == want
    assert calls == [1]


def test_swapped_heads_in_the_entry_do_not_swap_composition_scores(tmp_path) -> None:
    """The issue's case, end to end: heads 0 and 1 swapped in the entry; the
    composition scores read from a model whose layers came through the cache are those of a
    fresh probe."""
    from headlab.circuits.composition import composition_scores
    from headlab.models.hf.layer import keep_all

    def scores(model, layers):
        keep_all(model, layers)
        return composition_scores(
            TransformersModel("llama", model, None, causal=True), samples=4, seed=0
        )

    model = _on_headlab("llama")
    want = scores(model, probe(model, "llama"))
    probed_layers(model, "llama", root=tmp_path)
    (path,) = _entries(tmp_path)
    entry = json.loads(path.read_text())
    _heads_swapped(entry)
    path.write_text(json.dumps(entry))
    with pytest.warns(CacheNotice):
        got = scores(model, probed_layers(model, "llama", root=tmp_path))
    assert got.scores == want.scores


def test_models_of_other_shapes_or_configs_have_other_keys() -> None:
    llama, other = _on_headlab("llama"), build("mistral")
    assert probe_key(llama) == probe_key(_on_headlab("llama"))  # other weights, same key
    assert probe_key(llama) != probe_key(other)
    qwen2 = build("qwen2")
    assert probe_key(qwen2) != probe_key(llama)


def test_an_unwritable_cache_only_costs_the_probe(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    model = _on_headlab("gpt2")
    want = [_facts(layer) for layer in probe(model, "gpt2")]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheNotice)  # no entry there: nothing was discarded
        assert [_facts(layer) for layer in probed_layers(model, "gpt2", root=blocker)] == want


def test_a_class_outside_transformers_is_never_cached(tmp_path: Path) -> None:
    model = _on_headlab("llama")
    own = type("OwnLlama", (type(model),), {"__module__": "my_checkpoint.modeling"})
    model.__class__ = own
    assert probe_key(model) is None
    assert len(probed_layers(model, "llama", root=tmp_path)) == 2
    assert not (tmp_path / FOLDER).exists()


def test_a_load_writes_the_entry_and_the_next_load_reads_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HEADLAB_CACHE", str(tmp_path / "cache"))
    folder = write_family("qwen3", tmp_path / "qwen3")
    first = load_transformers(folder)
    assert len(_entries(tmp_path / "cache")) == 1
    monkeypatch.setattr(probe_cache, "probe", _no_probe)
    second = load_transformers(folder)
    assert [_facts(a)["sizes"] for a in first.attention_layers()] == [
        _facts(b)["sizes"] for b in second.attention_layers()
    ]
    assert second.attention_layers()[0].module is second.model.get_submodule(
        second.attention_layers()[0].path
    )


def test_a_finding_that_only_these_values_decide_is_not_kept(tmp_path: Path) -> None:
    """Two heads with equal queries (copied rows of W_Q) match one slice: if it were kept, the
    next model of these shapes with other weights would get their rows."""
    import torch

    model = _on_headlab("llama")
    q_proj = model.model.layers[0].self_attn.q_proj.weight
    with torch.no_grad():
        q_proj[8:16] = q_proj[0:8]  # head 1's W_Q is head 0's
    layers = probed_layers(model, "llama", root=tmp_path)
    rows = layers[0].query.rows
    assert len(set(rows)) < len(rows)  # the probe matched head 1 to head 0's slice
    assert not probe_cache.distinct(layers)
    assert _entries(tmp_path) == []


def test_a_change_of_the_probes_code_changes_every_key(monkeypatch) -> None:
    """An entry written by an older probe is never read back by a newer one: the probing
    modules' source is in the key."""
    model = _on_headlab("llama")
    before = probe_key(model)
    probe_cache._probe_code.cache_clear()
    real = Path.read_bytes

    def edited(path: Path) -> bytes:
        data = real(path)
        return data + b"\n# edited" if path.name == "observe.py" else data

    monkeypatch.setattr(Path, "read_bytes", edited)
    try:
        assert probe_key(model) != before
    finally:
        probe_cache._probe_code.cache_clear()
