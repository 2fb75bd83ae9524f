"""Shared test settings: offline model loading, deterministic hypothesis profile."""

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The packaged SmolLM2's safetensors conversion (models/gguf_cache.py) goes to a temporary folder
# shared by test sessions, never the user's cache; tests of the cache itself use tmp_path.
os.environ.setdefault(
    "HEADLAB_CACHE", os.path.join(tempfile.gettempdir(), f"headlab-tests-cache-{os.getuid()}")
)

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
    from transformers import BertConfig

    from headlab.models import default_model_dir, write_random_bert

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
    """The random BERT of ``tiny_dir`` through the production route (``TransformersModel``)."""
    from headlab.models import load

    return load(tiny_dir)


@pytest.fixture(scope="session")
def minilm():
    """The packaged all-MiniLM-L6-v2 through the production route (loaded once per session)."""
    from headlab.models import load

    return load("minilm")


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct through the production route, from its safetensors conversion in
    the tests' cache folder (loaded once per session)."""
    from headlab.models import load

    return load("smollm2")


@pytest.fixture(scope="session")
def smollm2_reference():
    """transformers' LlamaForCausalLM from the packaged GGUF itself, eager attention, float32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from headlab.models.packaged import packaged_smollm2

    path = packaged_smollm2()
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, attn_implementation="eager", dtype=torch.float32
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return model, tokenizer


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """A random Llama decoder's folder (transformers' save_pretrained): 3 layers, 6 query heads
    of 10 on 2 K/V heads, 64 positions, a word-level tokenizer of t0..t96 (vocab 97)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models

    folder = tmp_path_factory.mktemp("tiny-llama")
    config = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=60,
        num_attention_heads=6,
        num_key_value_heads=2,
        intermediate_size=43,
        num_hidden_layers=3,
        max_position_embeddings=64,
        rope_theta=500.0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(11)
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    vocab = {f"t{i}": i for i in range(97)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    from tokenizers import pre_tokenizers

    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture(scope="session")
def tiny_llama(tiny_llama_dir):
    """The random Llama decoder of ``tiny_llama_dir`` through the production route."""
    from headlab.models import load

    return load(tiny_llama_dir)


# The transformers route: the tiny family checkpoints of tests/models/hf_families.py (used by
# tests/models, tests/heads and tests/cli).
sys.path.insert(0, str(Path(__file__).parent / "models"))


@pytest.fixture(scope="session")
def hf_dirs(tmp_path_factory):
    """Family name -> a folder with its tiny checkpoint (config.json, model.safetensors,
    tokenizer.json), written once per session."""
    from hf_families import FAMILIES, write_family

    root = tmp_path_factory.mktemp("hf-families")
    return {name: write_family(name, root / name) for name in FAMILIES}


@pytest.fixture(scope="session")
def hf_loaded(hf_dirs):
    """Family name -> its checkpoint loaded through headlab (``TransformersModel``, float32),
    loaded on first use and kept for the session. Tests must not change the models."""
    from headlab.models.hf import load_transformers

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load_transformers(hf_dirs[name])
        return cache[name]

    return get


@pytest.fixture(scope="session")
def hf_eager(hf_dirs):
    """Family name -> the same checkpoint loaded by transformers alone, eager attention,
    float32 (the reference), loaded on first use and kept for the session."""
    import torch
    from hf_families import FAMILIES, model_class

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = (
                model_class(FAMILIES[name])
                .from_pretrained(hf_dirs[name], attn_implementation="eager", dtype=torch.float32)
                .eval()
            )
        return cache[name]

    return get


@pytest.fixture(autouse=True)
def _no_progress_lines(monkeypatch):
    """Where stderr is no terminal, a command still running after 2 s prints progress lines
    (``headlab.cli.progress``); on a busy machine a tiny command can pass 2 s, and a test that
    reads stderr would see them. The variable reaches the CLI's subprocesses too;
    tests/cli/test_progress.py sets its own delay."""
    import headlab.cli.progress as progress

    monkeypatch.setenv(progress.AFTER_VARIABLE, "never")
