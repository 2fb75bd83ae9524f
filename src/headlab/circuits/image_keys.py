"""Which queries and keys a score split reads on an image (score_keys.py's words for texts).

An image's positions are the class token (0), the registers (DINOv2 with registers) and the
patches, row by row (``models.hf.vision.TokenLayout``). ``ImageKeys.parse`` checks the words
before anything loads (ValueError, one line); ``resolve(layout)`` gives the ``KeySpec`` once
the image's layout is known:

    attended     the key the head gives the most weight (its highest score)
    top-K        the K highest-scoring keys (K >= 1)
    all          every position
    self         the query's own position
    cls          the class token
    registers    every register token (a model with registers)
    patch-N      patch N, counted row by row from 0
    N            position N (0: the class token)

Queries (``image_queries``): comma-separated positions (negative: from the end), ``cls`` or
``patch-N``. The text's patterns (induction, previous, bos) name nothing on an image.
"""

from __future__ import annotations

from dataclasses import dataclass

from headlab.circuits.score_keys import KeySpec

#: The words that need no layout (score_keys' own) and those that do.
PLAIN = ("attended", "all", "self")
NAMED = ("cls", "registers")
#: The text's patterns, refused on an image.
TEXT_ONLY = ("induction", "previous", "bos")


def _patch(word: str, flag: str) -> int | None:
    """N of "patch-N", None for another word; ValueError for a bad N."""
    if not word.startswith("patch-"):
        return None
    number = word[6:]
    if not number.isdigit():
        raise ValueError(f"{flag} patch-N needs a patch number N >= 0, got {word!r}")
    return int(number)


@dataclass(frozen=True)
class ImageKeys:
    """The parsed ``--keys`` of an image: ``spec`` (a word score_keys knows), or ``named`` ("cls",
    "registers"), or ``patch`` (patch-N's N)."""

    spec: KeySpec | None = None
    named: str = ""
    patch: int | None = None

    @staticmethod
    def parse(text: str) -> ImageKeys:
        word = text.strip().lower()
        if word in TEXT_ONLY:
            raise ValueError(
                f"--keys {word} is a text's pattern; an image's keys are one of "
                f"{', '.join(PLAIN + NAMED)}, top-K, patch-N or a position, got {text!r}"
            )
        if word in NAMED:
            return ImageKeys(named=word)
        patch = _patch(word, "--keys")
        if patch is not None:
            return ImageKeys(patch=patch)
        try:
            return ImageKeys(spec=KeySpec.parse(word))
        except ValueError:
            if word.startswith("top-"):
                raise
            raise ValueError(
                f"--keys must be one of {', '.join(PLAIN + NAMED)}, top-K, patch-N or a "
                f"position, got {text!r}"
            ) from None

    def resolve(self, layout) -> KeySpec:
        """The ``KeySpec`` on an image of ``layout`` (``TokenLayout``). ValueError (one line) for
        registers in a model without any, a patch or a position outside the image."""
        if self.spec is not None:
            if self.spec.kind == "position" and self.spec.count >= layout.tokens:
                raise ValueError(
                    f"--keys: a position must lie in 0..{layout.tokens - 1}, got {self.spec.count}"
                )
            return self.spec
        if self.named == "cls":
            return KeySpec.at([layout.cls], "cls")
        if self.named == "registers":
            if not layout.registers:
                raise ValueError("--keys registers: this model has no register tokens")
            return KeySpec.at(layout.registers, "registers")
        return KeySpec.at([patch_position(self.patch, layout, "--keys")], f"patch-{self.patch}")


def patch_position(patch: int, layout, flag: str) -> int:
    """The position of patch ``patch`` (row by row). ValueError outside the grid."""
    count = layout.grid[0] * layout.grid[1]
    if not 0 <= patch < count:
        raise ValueError(
            f"{flag} patch-N: the image has {count} patches ({layout.grid[0]} x "
            f"{layout.grid[1]}), N in 0..{count - 1}, got {patch}"
        )
    return layout.first_patch + patch


def check_image_queries(text: str) -> list[str]:
    """The ``--query`` words, checked without the layout: integers, "cls" or "patch-N"."""
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    if not words:
        raise ValueError("--query takes at least one position, got none")
    for word in words:
        if word != "cls" and _patch(word, "--query") is None and not word.lstrip("-").isdigit():
            raise ValueError(
                f"--query on an image takes positions, cls or patch-N, comma-separated, got "
                f"{word!r}"
            )
    return words


def image_queries(text: str, layout) -> list[int]:
    """The query positions ``text`` names on an image of ``layout``."""
    out = []
    for word in check_image_queries(text):
        patch = _patch(word, "--query")
        if word == "cls":
            out.append(layout.cls)
        elif patch is not None:
            out.append(patch_position(patch, layout, "--query"))
        else:
            at = int(word)
            position = at + layout.tokens if at < 0 else at
            if not 0 <= position < layout.tokens:
                raise ValueError(
                    f"--query must lie in -{layout.tokens}..{layout.tokens - 1} (the image's "
                    f"{layout.tokens} positions), got {at}"
                )
            out.append(position)
    return out


__all__ = ["ImageKeys", "check_image_queries", "image_queries", "patch_position"]
