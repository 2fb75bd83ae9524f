"""Shared test settings: offline model loading, deterministic hypothesis profile."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from hypothesis import HealthCheck, settings

settings.register_profile(
    "headlab",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("headlab")


# Model fixtures (tests/models, tests/heads, tests/cli): a tiny random BERT directory for fast
# tests, and the packaged MiniLM for tests marked ``model``. Imported lazily: extra ``models``.
import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A random BERT: E=15 with 3 heads of 5, 2 layers, FFN 23, 37 positions (distinct sizes)."""
    from headlab.models import BertConfig, default_model_dir, write_random_bert

    config = BertConfig(
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
    tokenizer = default_model_dir() / "tokenizer.json"
    return write_random_bert(tmp_path_factory.mktemp("tiny-bert"), config, tokenizer, seed=3)


@pytest.fixture
def tiny(tiny_dir):
    from headlab.models import load_encoder

    return load_encoder(tiny_dir)


@pytest.fixture(scope="session")
def minilm():
    from headlab.models import load_encoder

    return load_encoder()
