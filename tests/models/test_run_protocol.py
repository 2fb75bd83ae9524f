"""The run protocol's own types and its starting and stopping, on the toy family (which implements
it by hand, tests/toy_family.py): refusals in one line, a stop at every site of every block
returning what a recording of the whole run saw there, and a start past the last block."""

from __future__ import annotations

import pytest
import torch

from headlab.attention.interventions import record
from headlab.attention.sites import BLOCK_SITES, Sites
from headlab.models.interface import TokenBatch
from headlab.models.run_protocol import Block, RunnableModel, StopAt, Stream, cache
from toy_family import Toy


def _batch() -> TokenBatch:
    ids = torch.randint(0, 29, (2, 6), generator=torch.Generator().manual_seed(2))
    return TokenBatch(ids, torch.ones_like(ids, dtype=torch.bool), [])


def test_the_types_refuse_what_does_not_fit():
    with pytest.raises(ValueError, match="kind is one of text, patches, audio"):
        Stream("encoder", "video")
    assert Stream("patches", "patches", ("cls", "register")).named_positions == ("cls",
                                                                                 "register")
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
        with torch.no_grad(), record(block, sites) as seen, \
                record(block.attention, ["q", "k", "v", "head_outputs"]) as heads:  # fmt: skip
            toy.run_blocks(batch)
        for site in sites:
            got = toy.run_blocks(batch, start=block.index, hidden=kept.resid[block.index],
                                 stop=StopAt(block.index, site))  # fmt: skip
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
