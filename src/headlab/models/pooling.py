"""How an encoder's token states become one sentence embedding (sentence-transformers' pooling),
read from a model folder's sentence-transformers files and applied to a batch.

A folder may hold ``modules.json`` (a ``Normalize`` module: l2-normalise),
``1_Pooling/config.json`` (mean, [CLS] or max over tokens) and ``sentence_bert_config.json``
(``max_seq_length``: tokens kept per text). Without them: mean pooling, no normalisation, the
model's positions. Every problem raises one ValueError naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch.nn.functional as F
from torch import Tensor

from headlab.results.input_files import read_json


@dataclass(frozen=True)
class PoolingConfig:
    """How token states become a sentence embedding (sentence-transformers' pipeline).

    mode: "mean" (over non-padding tokens), "cls" or "max"; normalize: divide by the l2 norm;
    max_seq_length: tokens kept per text (longer texts are truncated, [SEP] kept).
    """

    mode: str = "mean"
    normalize: bool = False
    max_seq_length: int = 512


def read_pooling_config(model_dir: Path, max_positions: int) -> PoolingConfig:
    """The sentence-transformers pooling of ``model_dir``; mean pooling, no normalisation and
    ``max_positions`` tokens when the directory has no sentence-transformers files."""
    mode, normalize, max_len = "mean", False, max_positions
    modules_path = model_dir / "modules.json"
    if modules_path.is_file():
        modules = read_json(modules_path, "", expected=list)
        types = [str(m.get("type", "")) for m in modules if isinstance(m, dict)]
        normalize = any(t.endswith("models.Normalize") for t in types)
    pooling_path = model_dir / "1_Pooling" / "config.json"
    if pooling_path.is_file():
        pooling = read_json(pooling_path, "")
        flags = {
            "mean": pooling.get("pooling_mode_mean_tokens", False),
            "cls": pooling.get("pooling_mode_cls_token", False),
            "max": pooling.get("pooling_mode_max_tokens", False),
        }
        chosen = [name for name, on in flags.items() if on]
        others = [k for k, v in pooling.items() if k.startswith("pooling_mode_") and v]
        if len(chosen) != 1 or len(others) != 1:
            raise ValueError(
                f"{pooling_path}: expected exactly one of pooling_mode_mean_tokens, "
                f"pooling_mode_cls_token, pooling_mode_max_tokens, got {others}"
            )
        mode = chosen[0]
    st_path = model_dir / "sentence_bert_config.json"
    if st_path.is_file():
        max_len = read_json(st_path, "").get("max_seq_length", max_len)
        if (
            not isinstance(max_len, int)
            or isinstance(max_len, bool)
            or not (2 <= max_len <= max_positions)
        ):
            raise ValueError(
                f"{st_path}: max_seq_length must be in [2, {max_positions}], got {max_len}"
            )
    return PoolingConfig(mode=mode, normalize=normalize, max_seq_length=max_len)


def pool(states: Tensor, attention_mask: Tensor, config: PoolingConfig) -> Tensor:
    """(batch, pos, d_model) states and (batch, pos) bool mask -> (batch, d_model) embeddings."""
    if config.mode == "cls":
        out = states[:, 0]
    elif config.mode == "max":
        out = states.masked_fill(~attention_mask[..., None], float("-inf")).amax(dim=1)
    else:
        m = attention_mask[..., None].to(states.dtype)
        out = (states * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
    return F.normalize(out, p=2, dim=1) if config.normalize else out
