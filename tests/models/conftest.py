"""Fixtures of the transformers route: the tiny family checkpoints of ``hf_families``."""

from __future__ import annotations

import pytest


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
