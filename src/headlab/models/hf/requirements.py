"""What the transformers route needs installed, checked before it is used: one line naming what to
install, never a traceback.

The route (every trained model) is in the extra ``models`` (``pip install 'headlab[models]'``):
transformers >= ``MINIMUM`` (the mask registry's keywords ``q_length`` and ``q_offset``, which
``lazy_mask.py`` reads, appear in 5.4; 5.0 to 5.3 pass ``cache_position`` instead) and
accelerate, which transformers needs to read a GGUF file. ``require_transformers()`` runs first in
every entry of the route (``attach``, ``load_transformers``, ``supported_families``),
``require_accelerate`` before a GGUF file is read.
"""

from __future__ import annotations

import re

#: The oldest transformers whose mask registry passes what headlab's mask reads.
MINIMUM = (5, 4)
INSTALL = "pip install 'headlab[models]'"


def _version(text: str) -> tuple[int, ...]:
    """The leading numbers of a version string ("5.24.0.dev0" -> (5, 24, 0))."""
    numbers = re.match(r"\d+(?:\.\d+)*", text)
    return tuple(int(n) for n in numbers.group().split(".")) if numbers else ()


def require_transformers(what: str = "the transformers route") -> None:
    """ValueError naming what to install unless transformers >= MINIMUM can be imported."""
    wanted = ".".join(map(str, MINIMUM))
    try:
        import transformers
    except ImportError:
        raise ValueError(
            f"{what} needs transformers >= {wanted}, which is not installed: {INSTALL}"
        ) from None
    found = str(getattr(transformers, "__version__", "unknown"))
    if _version(found) < MINIMUM:
        raise ValueError(
            f"{what} needs transformers >= {wanted}, found {found}: "
            f"pip install 'transformers>={wanted}'"
        )


def require_accelerate(where: str) -> None:
    """ValueError naming what to install unless accelerate (transformers' GGUF reader needs it)
    can be imported."""
    try:
        import accelerate  # noqa: F401
    except ImportError:
        raise ValueError(
            f"{where}: transformers reads a GGUF file only with accelerate, which is not "
            f"installed: {INSTALL}"
        ) from None
