"""What a model's files say before its weights load: ``preview(source)`` reads its configuration
and its tokenizer only (no weight, no model built), so that a command can check a task against
the model (its length against the positions, its memory against the machine) before the long
load.

The same sources as ``headlab.models.load``, through the same first checks; a hub id still to
fetch gives no tokenizer (its files come with the load).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headlab.models.hf.config_fields import max_positions_of


@dataclass(frozen=True)
class ModelPreview:
    """``name``, transformers' ``config`` and the ``tokenizer`` (None: none at hand yet)."""

    name: str
    config: object
    tokenizer: object | None

    @property
    def max_positions(self) -> int:
        return max_positions_of(self.config)


def preview(
    name_or_path: str | Path | None = None,
    *,
    download: bool = False,
    trust_remote_code: bool = False,
) -> ModelPreview:
    """The ``ModelPreview`` of what ``load(name_or_path, ...)`` would load. Raises what ``load``
    raises for a source it refuses before reading weights (FileNotFoundError, ValueError)."""
    from headlab.models.hf.checkpoint import check_source as check_path
    from headlab.models.hf.checkpoint import consent, locate, read_config
    from headlab.models.hf.loader import load_tokenizer
    from headlab.models.hf.requirements import require_transformers
    from headlab.models.load import check_source
    from headlab.models.packaged import MINILM_NAME, SMOLLM2_NAME, default_model_dir

    check_path(name_or_path)
    trust_remote_code = consent(trust_remote_code)
    check_source(name_or_path)
    require_transformers(str(name_or_path or "minilm"))
    name = None
    if name_or_path is None or name_or_path == "minilm":
        source, name = default_model_dir(), MINILM_NAME
    elif name_or_path == "smollm2":
        from headlab.models.gguf_cache import converted
        from headlab.models.packaged import packaged_smollm2

        source, name = converted(packaged_smollm2()), SMOLLM2_NAME
    else:
        source = name_or_path
    checkpoint = locate(source, download=download)
    config = read_config(checkpoint, trust_remote_code)
    tokenizer = None if checkpoint.to_fetch else load_tokenizer(checkpoint, trust_remote_code)
    return ModelPreview(name or checkpoint.name, config, tokenizer)
