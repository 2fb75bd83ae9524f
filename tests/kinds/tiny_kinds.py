"""Random tiny models of each new kind, built by transformers from configs (no download), each as
an eager model and a twin on headlab's attention with the same weights.

Sizes are distinct where a family allows it (heads 4 vs 2, d_head 6, vocabulary 97), so that a
swapped axis fails. T5 keeps equal encoder and decoder depths: transformers' cache for T5 is
sized by the encoder's depth (generation fails otherwise, on eager too).
"""

from __future__ import annotations

import copy

import torch

VOCAB = 97
ENCODER_DECODERS = ("t5", "bart", "marian", "whisper")
VISION = ("vit", "dinov2", "dinov2_registers", "clip_vision")


def _encoder_decoder(kind: str):
    import transformers as tf

    sizes = dict(
        vocab_size=VOCAB,
        d_model=24,
        encoder_layers=2,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=2,
        encoder_ffn_dim=40,
        decoder_ffn_dim=40,
    )
    if kind == "t5":
        config = tf.T5Config(
            vocab_size=VOCAB,
            d_model=24,
            d_kv=6,
            d_ff=40,
            num_layers=3,
            num_decoder_layers=3,
            num_heads=4,
            relative_attention_num_buckets=8,
            decoder_start_token_id=0,
            pad_token_id=0,
            eos_token_id=1,
        )
        return tf.T5ForConditionalGeneration(config)
    if kind == "bart":
        config = tf.BartConfig(max_position_embeddings=64, **sizes)
        return tf.BartForConditionalGeneration(config)
    if kind == "marian":
        config = tf.MarianConfig(
            max_position_embeddings=64,
            decoder_start_token_id=96,
            pad_token_id=96,
            eos_token_id=0,
            **sizes,
        )
        return tf.MarianMTModel(config)
    config = tf.WhisperConfig(
        num_mel_bins=16,
        max_source_positions=50,
        max_target_positions=40,
        decoder_start_token_id=3,
        pad_token_id=2,
        eos_token_id=1,
        bos_token_id=1,
        suppress_tokens=None,
        begin_suppress_tokens=None,
        **sizes,
    )
    return tf.WhisperForConditionalGeneration(config)


def whisper_features():
    """A Whisper feature extractor for the tiny Whisper: 16 mel bins, 1 s windows (100 frames,
    the encoder's 50 positions)."""
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=16, chunk_length=1, sampling_rate=16000)


def _vision(kind: str):
    import transformers as tf

    common = dict(
        hidden_size=24,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=40,
        image_size=35,
        patch_size=7,
        num_channels=3,
    )
    if kind == "vit":
        return tf.ViTModel(tf.ViTConfig(**common), add_pooling_layer=False)
    if kind == "dinov2":
        return tf.Dinov2Model(tf.Dinov2Config(**common))
    if kind == "dinov2_registers":
        return tf.Dinov2WithRegistersModel(
            tf.Dinov2WithRegistersConfig(num_register_tokens=4, **common)
        )
    return tf.CLIPVisionModel(tf.CLIPVisionConfig(**common))


def twins(kind: str, seed: int = 0):
    """(eager model, the same weights on headlab's attention), both in eval mode."""
    from headlab.models.hf.registry import register

    torch.manual_seed(seed)
    build = _vision if kind in VISION else _encoder_decoder
    eager = build(kind).eval()
    eager.set_attn_implementation("eager")
    ours = copy.deepcopy(eager)
    ours.set_attn_implementation(register())
    return eager, ours


ALPHABET = "abcdefghijklmnopqrstuvwxyz .,!?"


def char_tokenizer(end: str | None = "</s>"):
    """A tokenizer of one token a character of ``ALPHABET`` (ids 3...), with <pad> 0, </s> 1 and
    <unk> 2, </s> appended to every text when ``end``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    vocab.update({c: 3 + i for i, c in enumerate(ALPHABET)})
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    if end is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"$A {end}", special_tokens=[(end, vocab[end])]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )


def saved(kind: str, folder):
    """The tiny model ``kind`` (headlab's twin's weights) saved to ``folder`` with what it reads
    with: a character tokenizer, Whisper's feature extractor, or an image processor."""
    from transformers import ViTImageProcessor

    _, model = twins(kind)
    model.save_pretrained(folder, safe_serialization=True)
    if kind in VISION:
        ViTImageProcessor(size={"height": 35, "width": 35}).save_pretrained(folder)
        return folder
    char_tokenizer().save_pretrained(folder)
    if kind == "whisper":
        whisper_features().save_pretrained(folder)
    return folder
