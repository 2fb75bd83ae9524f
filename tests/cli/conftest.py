"""Fixtures: a tiny random BERT directory (fast) and the packaged MiniLM (marked ``model``)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest

from headlab.models import BertConfig, default_model_dir, load_encoder, write_random_bert

# Distinct sizes: E=15 with 3 heads of 5, 2 layers, FFN 23, 37 positions.
TINY = BertConfig(
    vocab_size=30522,
    hidden_size=15,
    num_hidden_layers=2,
    num_attention_heads=3,
    intermediate_size=23,
    max_position_embeddings=37,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
    hidden_act="gelu",
    pad_token_id=0,
)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return write_random_bert(
        tmp_path_factory.mktemp("tiny-bert"), TINY, default_model_dir() / "tokenizer.json", seed=3
    )


@pytest.fixture
def tiny(tiny_dir):
    return load_encoder(tiny_dir)


@pytest.fixture(scope="session")
def minilm():
    return load_encoder()
