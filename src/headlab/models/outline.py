"""``outline``: what a model gives (``ModelOutline``), read from its files once, before any
weight loads, so that a command refuses a model without what its task needs in one line, and
checks a task against the model (its length against the positions, its memory against the
machine), before the long load.

The answer is the load's own: the same sources through the same first checks, the config read
and its model built on the meta device (``models/hf/loader.py``'s plan, no weights, no memory),
and the model is causal, with a language-model head, exactly when the loaded one will be
(``TransformersModel.objective_kind``). With ``tokenizer=True`` the tokenizer is read too (a hub
id still to fetch gives none: its files come with the load).
"""

from __future__ import annotations

from pathlib import Path

from headlab.models.interface import ModelOutline


def outline(
    name_or_path: str | Path | None = None,
    *,
    download: bool = False,
    trust_remote_code: bool = False,
    tokenizer: bool = False,
) -> ModelOutline:
    """The ``ModelOutline`` of what ``load(name_or_path, ...)`` would give (names and paths as
    ``load`` takes them), with its config, its positions and (``tokenizer``) its tokenizer.
    Raises what ``load`` raises before it reads any weight (FileNotFoundError, ValueError)."""
    from headlab.models.hf.checkpoint import check_source as check_path
    from headlab.models.hf.checkpoint import consent, locate, read_config
    from headlab.models.hf.requirements import require_transformers
    from headlab.models.load import check_source
    from headlab.models.packaged import MINILM_NAME, SMOLLM2_NAME, default_model_dir

    check_path(name_or_path)
    trust_remote_code = consent(trust_remote_code)
    check_source(name_or_path)
    require_transformers(str(name_or_path or "minilm"))
    name = None
    if name_or_path is None or name_or_path == "minilm":
        name, name_or_path = MINILM_NAME, default_model_dir()
    elif name_or_path == "smollm2":
        from headlab.models.gguf_cache import converted
        from headlab.models.packaged import packaged_smollm2

        name, name_or_path = SMOLLM2_NAME, converted(packaged_smollm2())
    from headlab.models.hf.adapter import objective_kind
    from headlab.models.hf.config_fields import max_positions_of
    from headlab.models.hf.loader import check_layers_held, load_tokenizer, plan_model
    from headlab.models.weight_files import checkpoint_shapes

    checkpoint = locate(name_or_path, download=download)
    config = read_config(checkpoint, trust_remote_code)
    # the load's own check before its meta build (a million declared layers: minutes)
    held = checkpoint_shapes(checkpoint.folder, checkpoint.gguf)
    check_layers_held(config, held, checkpoint.name)
    causal = plan_model(config, checkpoint.name, trust_remote_code).causal
    read = None
    if tokenizer and not checkpoint.to_fetch:
        read = load_tokenizer(checkpoint, trust_remote_code)
    return ModelOutline(
        name or checkpoint.name,
        causal,
        objective_kind(causal),
        config,
        read,
        max_positions_of(config),
    )


__all__ = ["outline"]
