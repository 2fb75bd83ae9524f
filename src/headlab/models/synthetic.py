"""A random BERT model directory, for tests and examples that need no trained weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file


def write_random_bert(
    path: str | Path, config, tokenizer_json: str | Path, *, seed: int = 0
) -> Path:
    """Write config.json and model.safetensors of a transformers ``BertModel`` of ``config`` (a
    ``transformers.BertConfig``; random values, its pooler included), a copy of
    ``tokenizer_json`` and sentence-transformers pooling files (mean, normalised) to ``path``.

    Weights are drawn with std 0.3 (LayerNorm scales around 1) so that attention is far from
    uniform and heads differ; transformers' own initialisation (std 0.02) leaves it nearly
    uniform. ``config.vocab_size`` must cover the tokenizer's ids.
    """
    from transformers import BertModel

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with torch.device("meta"):  # only the names and shapes, in the model's own order
        shapes = {name: t.shape for name, t in BertModel(config).state_dict().items()}
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in shapes.items():
        values = torch.randn(shape, generator=generator)
        tensors[name] = 1.0 + 0.1 * values if "LayerNorm.weight" in name else 0.3 * values
    save_file(tensors, str(path / "model.safetensors"))
    config.to_json_file(str(path / "config.json"))
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
