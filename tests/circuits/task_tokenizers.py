"""A tiny tokenizer for the circuit tasks' tests, and a tiny random Llama that reads it.

``word_tokenizer(names)``: a word-level tokenizer (transformers' ``PreTrainedTokenizerFast`` over
``tokenizers``' WordLevel) whose pre-tokenizer splits on whitespace and punctuation and cuts
digits in pairs (so " 1732" is "17" + "32", as GPT-2 writes years), with BOS ``<s>`` added in
front of every text; its vocabulary: every piece of ``headlab.models.long_document`` (the copy
task's filler and passage words), the IOI and greater-than templates' words, ``names`` and the
two-digit numbers 00 .. 99 (``filler=False``: without the document's words).
"""

from __future__ import annotations

import functools

import torch

from headlab.circuits.tasks_builtin import GT_NOUNS, IOI_TEMPLATES, PLACES, THINGS
from headlab.models.corpus import long_document

SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]
NAMES = ("Mary", "John", "Alice", "Bob", "Tom", "Kate", "Sam")


@functools.cache
def word_tokenizer(names: tuple[str, ...] = NAMES, filler: bool = True):
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Punctuation(),
            pre_tokenizers.Split(Regex(r"\d\d"), behavior="isolated"),
        ]
    )
    text = " ".join(
        [
            long_document() if filler else "",
            *IOI_TEMPLATES,
            *PLACES,
            *THINGS,
            *GT_NOUNS,
            *names,
            "The lasted from the year 17 to",
            *(f"{yy:02d}" for yy in range(100)),
        ]
    )
    pieces = sorted({piece for piece, _ in pre.pre_tokenize_str(text)})
    vocab = {token: i for i, token in enumerate(SPECIAL + [p for p in pieces if p not in SPECIAL])}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", vocab["<s>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
    )


def tiny_llama(tokenizer, seed: int = 2):
    """A random Llama (embed 24, 3 heads on 1 K/V head, 2 layers) over ``tokenizer``'s
    vocabulary, attached to headlab."""
    import transformers

    from headlab.models.hf import attach

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=24,
        num_attention_heads=3,
        num_key_value_heads=1,
        num_hidden_layers=2,
        intermediate_size=13,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    return attach(model, tokenizer, name="tiny-llama")
