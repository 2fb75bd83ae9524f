"""``model families``' observation, made once per transformers version: observed here, kept and
read back by ``results.kept_families`` (torch-free, so that a later call takes a second)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from headlab.results.family_support import FamilySupport
from headlab.results.kept_families import keep_family_support, kept_family_support


def observe_and_keep(
    on_step: Callable[[int, int, str], None] | None = None, root: Path | None = None
) -> FamilySupport:
    """``family_support(on_step)`` observed now, and kept for the next calls (nothing kept
    where the cache cannot be written)."""
    from headlab.models.hf.families import family_support, text_families

    observed = text_families()
    support = family_support(on_step)
    keep_family_support(support, observed, root)
    return support


def cached_family_support(
    on_step: Callable[[int, int, str], None] | None = None, root: Path | None = None
) -> FamilySupport:
    """The kept observation where there is a right one, else ``observe_and_keep``."""
    return kept_family_support(root) or observe_and_keep(on_step, root)


__all__ = ["cached_family_support", "observe_and_keep"]
