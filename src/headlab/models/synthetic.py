"""A random BERT model directory, for tests and examples that need no trained weights."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import save_file

from headlab.models.config import BertConfig
from headlab.models.weights import expected_shapes


def write_random_bert(
    path: str | Path, config: BertConfig, tokenizer_json: str | Path, *, seed: int = 0
) -> Path:
    """Write config.json, model.safetensors (transformers' BertModel tensor names, random values,
    its pooler included), a copy of
    ``tokenizer_json`` and sentence-transformers pooling files (mean, normalised) to ``path``.

    Weights are drawn with std 0.3 (LayerNorm scales around 1) so that attention is far from
    uniform and heads differ. ``config.vocab_size`` must cover the tokenizer's ids.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in expected_shapes(config).items():
        values = torch.randn(shape, generator=generator)
        tensors[name] = 1.0 + 0.1 * values if "LayerNorm.weight" in name else 0.3 * values
    # the pooler, which transformers' BertModel holds (sentence-transformers does not use it)
    width = config.hidden_size
    tensors["pooler.dense.weight"] = 0.3 * torch.randn((width, width), generator=generator)
    tensors["pooler.dense.bias"] = 0.3 * torch.randn((width,), generator=generator)
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"model_type": "bert", **asdict(config)}))
    shutil.copyfile(tokenizer_json, path / "tokenizer.json")
    (path / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "type": "sentence_transformers.models.Normalize"},
            ]
        )
    )
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(
        json.dumps({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False})
    )
    return path
