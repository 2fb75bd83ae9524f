"""The sweep's ``TinyTransformer`` as the transformers GPT-2 that computes the same function, so
that the circuits tools (which run on the transformers route) measure the model the sweep
trained, not a look-alike.

The two architectures are the same up to names: token embedding + learned positions, pre-LN
blocks [LN -> attention -> residual, LN -> MLP(Linear, GELU, Linear) -> residual], a final LN and
a linear readout. The map, for a plain (not talking-heads), non-GQA model whose heads fill
d_model, with one token feature and the readout at the last position:

    embed[0], pos          -> wte, wpe
    ln1, ln2, ln_f         -> ln_1, ln_2, ln_f           (eps 1e-5 both)
    attn.in_proj_weight    -> c_attn.weight^T            (Conv1D keeps (in, out); [q; k; v])
    attn.out_proj          -> c_proj (transposed)
    mlp[0], mlp[2]         -> c_fc, mlp.c_proj           (transposed); GELU -> "gelu" (exact)
    readout (W, b)         -> lm_head = W (no bias in GPT-2); b moved into ln_f's bias:
                              b_f' = b_f + pinv(W) b, so W b_f' = W b_f + b (W has full row rank)

GPT-2 reads the readout at every position; ``logits[:, -1]`` is the sweep's output. The
attention scale is 1 / sqrt(d_head) in both. A model this map does not cover raises ValueError
naming what differs.
"""

from __future__ import annotations

import torch

from headlab.experiments.tiny_transformer import TinyTransformer
from headlab.models.hf import attach
from headlab.models.hf.adapter import TransformersModel


def _refuse_unmappable(tiny: TinyTransformer) -> None:
    spec = tiny.spec
    if len(spec.vocab_sizes) != 1 or spec.readout != "last" or spec.num_outputs != 1:
        raise ValueError(
            f"only tasks with one token feature and one output at the last position map to "
            f"GPT-2, got task {spec.name!r}"
        )
    if not spec.causal:
        raise ValueError(f"GPT-2 is causal; task {spec.name!r} is not")
    attn = tiny.blocks[0].attn
    d_model = tiny.pos.weight.shape[1]
    plain = getattr(attn, "in_proj_weight", None) is not None and not hasattr(attn, "pre_mix")
    if (
        not plain
        or attn.num_kv_heads != attn.num_heads
        or attn.num_heads * attn.head_dim != d_model
        or getattr(attn, "rotary_base", None) is not None
    ):
        raise ValueError(
            "only plain attention without GQA or rotary whose heads fill d_model maps to GPT-2, "
            f"got {type(attn).__name__}({attn.num_heads} heads of {attn.head_dim}, "
            f"{attn.num_kv_heads} K/V heads, d_model {d_model})"
        )


def gpt2_like(tiny: TinyTransformer) -> torch.nn.Module:
    """A transformers ``GPT2LMHeadModel`` (eager attention, eval mode) computing ``tiny``'s
    logits: ``gpt2(input_ids=tokens[..., 0]).logits[:, -1]`` equals ``tiny(tokens)[0][:, 0]``.
    The weights are copies (the sweep's model is left as it is)."""
    import transformers

    _refuse_unmappable(tiny)
    spec = tiny.spec
    d_model = tiny.pos.weight.shape[1]
    first = tiny.blocks[0]
    config = transformers.GPT2Config(
        vocab_size=spec.vocab_sizes[0],
        n_positions=spec.seq_len,
        n_embd=d_model,
        n_layer=len(tiny.blocks),
        n_head=first.attn.num_heads,
        n_inner=first.mlp[0].out_features,
        activation_function="gelu",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=first.ln1.eps,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    config._attn_implementation = "eager"
    gpt2 = transformers.GPT2LMHeadModel(config).to(tiny.pos.weight.dtype).eval()
    readout_w = tiny.readout.weight.detach()  # (vocab, d_model)
    classes = readout_w.shape[0]
    if int(torch.linalg.matrix_rank(readout_w.double())) < classes:
        raise ValueError(
            f"the readout's bias moves into ln_f's only when its weight has full row rank "
            f"{classes} (d_model >= classes), got rank "
            f"{int(torch.linalg.matrix_rank(readout_w.double()))} at d_model {d_model}"
        )
    moved = torch.linalg.pinv(readout_w.double()) @ tiny.readout.bias.detach().double()
    state = {
        "transformer.wte.weight": tiny.embed[0].weight,
        "transformer.wpe.weight": tiny.pos.weight,
        "transformer.ln_f.weight": tiny.ln_f.weight,
        "transformer.ln_f.bias": tiny.ln_f.bias + moved.to(readout_w.dtype),
        "lm_head.weight": readout_w,
    }
    for n, block in enumerate(tiny.blocks):
        prefix = f"transformer.h.{n}."
        state |= {
            prefix + "ln_1.weight": block.ln1.weight,
            prefix + "ln_1.bias": block.ln1.bias,
            prefix + "ln_2.weight": block.ln2.weight,
            prefix + "ln_2.bias": block.ln2.bias,
            prefix + "attn.c_attn.weight": block.attn.in_proj_weight.t(),
            prefix + "attn.c_attn.bias": block.attn.in_proj_bias,
            prefix + "attn.c_proj.weight": block.attn.out_proj.weight.t(),
            prefix + "attn.c_proj.bias": block.attn.out_proj.bias,
            prefix + "mlp.c_fc.weight": block.mlp[0].weight.t(),
            prefix + "mlp.c_fc.bias": block.mlp[0].bias,
            prefix + "mlp.c_proj.weight": block.mlp[2].weight.t(),
            prefix + "mlp.c_proj.bias": block.mlp[2].bias,
        }
    missing, unexpected = gpt2.load_state_dict(
        {k: v.detach().clone().contiguous() for k, v in state.items()}, strict=False
    )
    missing = [k for k in missing if not k.endswith(".attn.bias")]  # GPT-2's causal buffers
    if missing or unexpected:
        raise ValueError(f"GPT-2 weights not matched: missing {missing}, unexpected {unexpected}")
    return gpt2


def as_transformers(tiny: TinyTransformer, name: str | None = None) -> TransformersModel:
    """``gpt2_like(tiny)`` attached (headlab's attention and sites inside it), ready for the
    circuits tools."""
    return attach(gpt2_like(tiny), name=name or f"sweep-{tiny.spec.name}-gpt2", announce=False)


__all__ = ["as_transformers", "gpt2_like"]
