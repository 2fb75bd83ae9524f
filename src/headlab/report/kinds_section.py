"""The report's section on encoder-decoders and image models: read ``model heads``' results
files of those kinds and show their displays (``report/displays/kinds_display.py``): each
attention kind's heads and one cross-attention head's (target, source) pattern; an image model's
heads and one head's class-token attention on the 2-D patch grid, high-norm patches outlined.
The report measures nothing itself; the displays write every text as text."""

from __future__ import annotations

from pathlib import Path

from headlab.report.displays import show
from headlab.report.reading import Skipped, skipping
from headlab.results.json_store import read_result
from headlab.results.locations import model_results
from headlab.results.stream_heads import EncoderDecoderHeads, VisionHeads

# part -> (results type, the command that writes its file)
PARTS = {
    "cross": (EncoderDecoderHeads, "headlab model heads --model-dir MODEL --source-text TEXT"),
    "vision": (VisionHeads, "headlab model heads --model-dir MODEL --image IMAGES"),
}
FILES = {
    "cross": model_results("heads-encoder-decoder").name,
    "vision": model_results("heads-vision").name,
}


def kinds_sections(directory: Path) -> dict:
    """{"cross": part, "vision": part}: each the file's model and its display's HTML, or
    {missing: command, file} (and skipped: why, for a file that breaks its schema)."""
    out = {}
    for key, (kind, command) in PARTS.items():
        path = Path(directory) / FILES[key]
        part = skipping(path, lambda p=path, k=kind: _part(p, k))
        if isinstance(part, Skipped):
            out[key] = part.part(command)
        elif part is None:
            out[key] = {"missing": command, "file": str(path)}
        else:
            out[key] = part
    return out


def _part(path: Path, kind: type) -> dict | None:
    result = read_result(path, kind)  # ValueError naming the file and the field
    if result is None:
        return None
    return {"model": result.model, "display": show(result).html()}
