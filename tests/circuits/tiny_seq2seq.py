"""Tiny random T5, BART and Whisper models that transformers builds, in float64, with
headlab's twin of each, and readers of the eager modules' own inputs: what the score split's
encoder-decoder tests (test_score_split_seq2seq.py, test_score_split_cross_sources.py) check
against.

Sizes are distinct where the family allows (d_model 35: 5 encoder heads of 7, 7 decoder heads
of 5; Whisper, whose sinusoidal positions need an even width, d_model 42: 7 encoder heads of 6, 6
decoder heads of 7; FFN 37 and 41; 7 source tokens, 11 target tokens; Whisper 13 source
positions from 11 mel bins).
"""

import torch
import transformers

from headlab.models.hf.encoder_decoder import EncoderDecoderModel, SourceBatch
from headlab.models.hf.registry import register

VOCAB, D_MODEL = 53, 35
SOURCE = [[5, 9, 12, 7, 30, 2, 8]]
TARGET = [[4, 11, 6, 19, 4, 23, 40, 3, 17, 22]]


def _config(kind: str):
    if kind == "t5":
        return transformers.T5Config(
            vocab_size=VOCAB,
            d_model=D_MODEL,
            d_kv=7,
            d_ff=37,
            num_layers=2,
            num_decoder_layers=3,
            num_heads=5,
            relative_attention_num_buckets=8,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
        )
    sizes = dict(
        vocab_size=VOCAB,
        d_model=D_MODEL,
        encoder_layers=2,
        decoder_layers=3,
        encoder_attention_heads=5,
        decoder_attention_heads=7,
        encoder_ffn_dim=37,
        decoder_ffn_dim=41,
    )
    if kind == "whisper":  # its sinusoidal positions need an even width
        sizes.update(d_model=42, encoder_attention_heads=7, decoder_attention_heads=6)
    if kind == "bart":
        return transformers.BartConfig(max_position_embeddings=29, **sizes)
    return transformers.WhisperConfig(
        num_mel_bins=11,
        max_source_positions=13,
        max_target_positions=29,
        decoder_start_token_id=3,
        pad_token_id=2,
        eos_token_id=1,
        bos_token_id=1,
        suppress_tokens=None,
        begin_suppress_tokens=None,
        **sizes,
    )


MODELS = {
    "t5": transformers.T5ForConditionalGeneration,
    "bart": transformers.BartForConditionalGeneration,
    "whisper": transformers.WhisperForConditionalGeneration,
}


def tiny_models(kind: str):
    """(eager model, headlab's twin as an ``EncoderDecoderModel``, source, target ids)."""
    torch.manual_seed(11)
    eager = MODELS[kind](_config(kind)).eval()
    with torch.no_grad():  # the init's constant norms and biases become random
        for parameter in eager.parameters():
            if parameter.ndim == 1:
                parameter.normal_(0.3, 0.4)
    eager = eager.double()
    eager.set_attn_implementation("eager")
    ours = MODELS[kind](_config(kind)).eval().double()
    ours.load_state_dict(eager.state_dict())
    ours.set_attn_implementation(register())
    seq2seq = EncoderDecoderModel(kind, ours)
    if kind == "whisper":
        features = torch.randn(
            1, 11, 26, dtype=torch.float64, generator=torch.Generator().manual_seed(2)
        )
        labels = [[f"{0.02 * i:.2f}s" for i in range(13)]]
        source = SourceBatch(
            {"input_features": features}, torch.ones(1, 13, dtype=torch.bool), labels
        )
    else:
        source = seq2seq.source_ids(SOURCE)
    target = seq2seq.target_ids(TARGET).input_ids
    return eager, seq2seq, source, target


def cross_module(eager, kind: str, layer: int):
    decoder = eager.get_decoder()
    if kind == "t5":
        return decoder.block[layer].layer[1].EncDecAttention
    return decoder.layers[layer].encoder_attn


def projections(module):
    return (module.q, module.k) if hasattr(module, "q") else (module.q_proj, module.k_proj)


def eager_inputs(eager, kind, layer, source, target):
    """The eager cross-attention's own inputs: its query stream (batch, pos, d_model) and the
    encoder's final states (batch, source pos, d_model); and the eager model's output."""
    module = cross_module(eager, kind, layer)
    seen = {}

    def keep(_module, args, kwargs):
        seen["h"] = args[0] if args else kwargs["hidden_states"]
        seen["kv"] = kwargs["key_value_states"]

    handle = module.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        with torch.no_grad():
            out = eager(
                **source.inputs, decoder_input_ids=target, output_attentions=True, use_cache=False
            )
    finally:
        handle.remove()
    return module, seen["h"][0], seen["kv"][0], out


def head_slice(t: torch.Tensor, head: int, width: int) -> torch.Tensor:
    return t[..., head * width : (head + 1) * width]


def module_heads(module) -> int:
    return int(getattr(module, "n_heads", None) or module.num_heads)


def self_attention_input(module, run) -> torch.Tensor:
    """(pos, d_model) the hidden states the eager self-attention ``module`` reads in ``run()``."""
    seen = {}

    def keep(_module, args, kwargs):
        seen.setdefault("h", args[0] if args else kwargs["hidden_states"])

    handle = module.register_forward_pre_hook(keep, with_kwargs=True)
    try:
        with torch.no_grad():
            run()
    finally:
        handle.remove()
    return seen["h"][0]
