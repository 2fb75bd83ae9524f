"""The run protocol's own types and its starting and stopping, on the toy family (which implements
it by hand, tests/toy_family.py): refusals in one line, a stop at every site of every block
returning what a recording of the whole run saw there, and a start past the last block."""

from __future__ import annotations

import pytest
import torch

from headlab.attention.interventions import intervene, record
from headlab.attention.sites import BLOCK_SITES, Sites
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import Block, RunnableModel, StopAt, Stream, cache
from toy_family import D, H, Toy
from toy_seq2seq import ENCODER, ToySeq2Seq


def _batch() -> TokenBatch:
    ids = torch.randint(0, 29, (2, 6), generator=torch.Generator().manual_seed(2))
    return TokenBatch(ids, torch.ones_like(ids, dtype=torch.bool), [])


def test_the_types_refuse_what_does_not_fit():
    with pytest.raises(ValueError, match="kind is one of text, patches, audio"):
        Stream("encoder", "video")
    assert Stream("patches", "patches", ("cls", "register")).named_positions == ("cls", "register")
    with pytest.raises(ValueError, match="a run stops at one of"):
        StopAt(0, "nowhere")
    with pytest.raises(ValueError, match="a run stops at one of"):
        StopAt(0, "mlp_out", cross=True)  # a cross-attention has attention sites only
    toy = Toy.build()
    attention = toy.attention_layers()[0]
    with pytest.raises(ValueError, match="a block's sites are"):
        Block(0, "decoder", attention, Sites(), True, False)
    with pytest.raises(ValueError, match="cross-attention and the stream it reads go together"):
        Block(0, "decoder", attention, Sites(BLOCK_SITES), True, False, attention, None)


@pytest.mark.parametrize("mlp", [False, True])
def test_a_stop_at_each_site_is_what_the_whole_run_saw(mlp):
    toy = Toy.build(seed=4, mlp=mlp)
    assert isinstance(toy, RunnableModel)
    batch = _batch()
    kept = cache(toy, batch)
    for block in toy.blocks():
        sites = [s for s in BLOCK_SITES if mlp or not s.startswith("mlp")]
        with (
            torch.no_grad(),
            record(block, sites) as seen,
            record(block.attention, ["q", "k", "v", "head_outputs"]) as heads,
        ):
            toy.run_blocks(batch)
        for site in sites:
            got = toy.run_blocks(
                batch,
                start=block.index,
                hidden=kept.resid[block.index],
                stop=StopAt(block.index, site),
            )
            torch.testing.assert_close(got, seen[site])
        for site in ("q", "k", "v", "head_outputs"):
            got = toy.run_blocks(batch, stop=StopAt(block.index, site))
            torch.testing.assert_close(got, heads[site])
    last = len(toy.blocks())
    final = toy.run_blocks(batch, start=last, hidden=kept.resid[last])
    torch.testing.assert_close(final, kept.final)
    with pytest.raises(ValueError, match="needs its residual stream"):
        toy.run_blocks(batch, start=1)
    with pytest.raises(ValueError, match=r"start must be a block, 0\.\.2"):
        toy.run_blocks(batch, start=3, hidden=kept.resid[0])
    with pytest.raises(ValueError, match="has no cross-attention"):
        toy.run_blocks(batch, stop=StopAt(0, "q", cross=True))


def test_two_streams_fit_the_protocol():
    """The toy encoder-decoder: its decoder blocks' cross-attention reads the encoder's final
    states at its key and value inputs; a run that starts in the decoder with the encoder's
    states as its source gives the whole run's output; an intervention in the encoder reaches
    the decoder through the cross-attention."""
    model = ToySeq2Seq(seed=2)
    assert isinstance(model, RunnableModel)
    assert [s.name for s in model.streams()] == ["encoder", "decoder"]
    blocks = model.blocks()
    assert [(b.stream, b.reads) for b in blocks] == [("encoder", None)] * ENCODER + [
        ("decoder", "encoder")
    ] * (len(blocks) - ENCODER)
    source = _batch()
    target = TokenBatch(source.input_ids.flip(1)[:, :5], source.attention_mask[:, :5], [])
    inputs = {"encoder": source, "decoder": target}
    kept = cache(model, inputs)
    memory = kept.streams_out["encoder"]
    with torch.no_grad():
        out = model.run_blocks(inputs, stop=StopAt(ENCODER - 1, "resid_out"))
    torch.testing.assert_close(memory, out)
    for block in blocks[ENCODER:]:
        with torch.no_grad():
            keys = model.run_blocks(inputs, stop=StopAt(block.index, "k", cross=True))
        w_k = block.cross_attention.k.weight  # (head * d_head, d_model)
        want = (memory @ w_k.T).view(2, 6, H, D).transpose(1, 2)  # (batch, head, k_pos, d_head)
        torch.testing.assert_close(keys, want)
        with torch.no_grad():
            again = model.run_blocks(
                inputs,
                start=block.index,
                hidden=kept.resid[block.index],
                sources={"encoder": memory},
            )
        torch.testing.assert_close(again, kept.final)
    with pytest.raises(ValueError, match="needs the encoder's states"):
        model.run_blocks(inputs, start=ENCODER, hidden=kept.resid[ENCODER])
    with torch.no_grad(), intervene(blocks[0], "mlp_out", lambda t: 0 * t):
        moved = model.run_blocks(inputs)
    assert not torch.allclose(moved, kept.final)
