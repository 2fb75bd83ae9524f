"""The lazy mask: every block of query rows equals the mask transformers builds for the same call.

For each family, the same inputs run through headlab (which receives ``LazyMask``s) and through
transformers' eager attention (which receives the materialised additive masks, caught by a
forward pre-hook on each attention module). Block by block (3 rows at a time, so blocks start
and end inside windows), ``LazyMask.allowed`` must equal the eager mask's rows. Cases: a
right-padded batch (every family; the sliding windows of Mistral, Gemma 2/3 and gpt-oss are
shorter than the text; BERT is bidirectional), an unpadded text (the cheap kinds), and decoding
with the model's cache from a left-padded batch (decoders).
"""

from __future__ import annotations

import pytest
import torch
from hf_families import FAMILIES, VOCAB, WINDOW
from test_hf_calls import LAYOUT

from headlab.models.hf.attention_function import headlab_attention
from headlab.models.hf.lazy_mask import LazyMask, headlab_mask
from headlab.models.hf.registry import NAME

BLOCK = 3
DECODERS = [name for name, family in FAMILIES.items() if family.causal]


def _eager_masks(name, model, run):
    """The attention_mask each attention module of family ``name``'s ``model`` receives during
    ``run(model)``."""
    module_class = LAYOUT[name][0]
    seen = []

    def hook(module, args, kwargs):
        seen.append(kwargs["attention_mask"])

    handles = [
        m.register_forward_pre_hook(hook, with_kwargs=True)
        for m in model.modules()
        if type(m).__name__ == module_class
    ]
    try:
        with torch.no_grad():
            run(model)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _lazy_masks(model, run, monkeypatch):
    from transformers import AttentionInterface

    seen = []

    def recorder(module, query, key, value, attention_mask, **kwargs):
        seen.append(attention_mask)
        return headlab_attention(module, query, key, value, attention_mask, **kwargs)

    with monkeypatch.context() as patch:
        patch.setitem(AttentionInterface._global_mapping, NAME, recorder)
        with torch.no_grad():
            run(model)
    return seen


def _attend(eager_mask, shape) -> torch.Tensor:
    """transformers' eager mask -> bool (batch, 1, q, k), True = may attend."""
    if eager_mask is None:  # transformers skips a bidirectional mask without padding
        return torch.ones(shape, dtype=torch.bool)
    return (eager_mask == 0).expand(shape)


def _check_blocks(lazy: list, eager: list) -> None:
    assert len(lazy) == len(eager) > 0
    for layer, (mask, reference) in enumerate(zip(lazy, eager, strict=True)):
        assert isinstance(mask, LazyMask)
        shape = (mask.batch_size, 1, mask.q_length, mask.kv_length)
        expected = _attend(reference, shape)
        for start in range(0, mask.q_length, BLOCK):
            stop = min(start + BLOCK, mask.q_length)
            block = mask.allowed(start, stop)
            assert torch.equal(block, expected[:, :, start:stop]), (layer, start)
            assert torch.equal(mask.rows(start, stop), ~block)
        _check_kind(mask, expected)


def _check_kind(mask: LazyMask, expected: torch.Tensor) -> None:
    """The cheap flag says no more than the truth: "causal" is the causal pattern at the
    mask's offset, "full" sees everything."""
    if mask.kind == "full":
        assert bool(expected.all())
    elif mask.kind == "causal":
        query = torch.arange(mask.q_length)[:, None] + mask.q_offset - mask.kv_offset
        causal = torch.arange(mask.kv_length)[None, :] <= query
        assert torch.equal(expected, causal.expand_as(expected))


def _ids(batch: int, length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, length), generator=generator)


@pytest.mark.parametrize("name", FAMILIES)
def test_blocks_equal_transformers_masks_on_a_right_padded_batch(
    name, hf_loaded, hf_eager, monkeypatch
):
    ids = _ids(3, 11, 0)
    padding = torch.ones(3, 11, dtype=torch.long)
    padding[1, 7:] = 0
    padding[2, 2:] = 0

    def run(model):
        model(input_ids=ids, attention_mask=padding)

    lazy = _lazy_masks(hf_loaded(name).model, run, monkeypatch)
    _check_blocks(lazy, _eager_masks(name, hf_eager(name), run))
    assert {m.kind for m in lazy} == {"rows"}
    assert WINDOW < 11  # the windows bite inside this text


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2", "bert"])
def test_blocks_and_kinds_without_padding(name, hf_loaded, hf_eager, monkeypatch):
    ids = _ids(2, 9, 1)

    def run(model):
        model(input_ids=ids, attention_mask=torch.ones_like(ids))

    lazy = _lazy_masks(hf_loaded(name).model, run, monkeypatch)
    _check_blocks(lazy, _eager_masks(name, hf_eager(name), run))
    expected = {"llama": {"causal"}, "mistral": {"rows"}, "gemma2": {"causal", "rows"}}
    assert {m.kind for m in lazy} == expected.get(name, {"full"})


def _decode(model, ids, padding, steps=3):
    """Prefill, then ``steps`` one-token steps through the model's own cache (teacher-forced:
    the same tokens for every implementation)."""
    out = model(input_ids=ids, attention_mask=padding, use_cache=True)
    cache, mask = out.cache, padding
    for step in range(steps):
        token = _ids(ids.shape[0], 1, 10 + step)
        mask = torch.cat([mask, torch.ones_like(token)], dim=1)
        cache = model(input_ids=token, attention_mask=mask, cache=cache, use_cache=True).cache


@pytest.mark.parametrize("name", DECODERS)
def test_blocks_equal_transformers_masks_while_decoding(name, hf_loaded, hf_eager, monkeypatch):
    ids = _ids(2, 7, 2)
    padding = torch.ones(2, 7, dtype=torch.long)
    padding[1, :3] = 0  # left padding, as for generation

    def run(model):
        _decode(model, ids, padding)

    lazy = _lazy_masks(hf_loaded(name).model, run, monkeypatch)
    _check_blocks(lazy, _eager_masks(name, hf_eager(name), run))
    decoding = [m for m in lazy if m.q_length == 1]
    assert len(decoding) == 3 * hf_loaded(name).num_layers
    if name in ("mistral", "gemma2", "gemma3_text", "gpt_oss"):  # the cache keeps the window
        assert any(m.kv_offset > 0 and m.kv_length == WINDOW for m in decoding)


def test_the_flag_without_a_window_or_padding_is_causal_at_the_cache_offset():
    """Decoding one query over a full cache: causal, the query at key column kv_length - 1."""
    from transformers.masking_utils import causal_mask_function

    mask = headlab_mask(
        batch_size=2,
        q_length=1,
        kv_length=8,
        q_offset=7,
        mask_function=causal_mask_function,
        attention_mask=torch.ones(2, 8, dtype=torch.bool),
    )
    assert mask.kind == "causal"
    spec = mask.spec(causal=True)
    assert (spec.causal, spec.q_offset, spec.rows) == (True, 7, None)
    assert bool(mask.allowed(0, 1).all())


def test_rows_out_of_range_are_refused():
    mask = headlab_mask(batch_size=1, q_length=4, kv_length=4)
    with pytest.raises(ValueError, match=r"0 <= start < stop <= q_length=4, got start=2, stop=5"):
        mask.allowed(2, 5)
