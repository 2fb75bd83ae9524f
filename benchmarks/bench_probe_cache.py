"""What the probe cache saves, and what checking an entry costs, on SmolLM2 (side by side).

Three ways to get the attention layers of the loaded model, interleaved in one process
(``side_by_side.interleaved``; the weights are paged in by a first call of each):

- ``search``: ``probe`` (the observed three-token forward, then the search of every projection's
  output for every head's query, key and value);
- ``checked entry``: ``probed_layers`` reading its entry and checking it by a probe of one
  layer (a forward stopped after the first attention layer; what a cached load does now);
- ``read only``: the entry read and parsed, no forward (a lower bound: what trusting the entry
  would cost, as before the check).

    HEADLAB_CACHE=/tmp/bench-cache PYTHONPATH=src .venv/bin/python benchmarks/bench_probe_cache.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import warnings
from pathlib import Path

from side_by_side import interleaved


def main(repeats: int = 7) -> None:
    import torch

    from headlab.models.gguf_cache import converted
    from headlab.models.hf.probe import probe
    from headlab.models.hf.probe_cache import FOLDER, probe_key, probed_layers, read_templates
    from headlab.models.hf.registry import register
    from headlab.models.packaged import packaged_smollm2

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM

    folder = converted(packaged_smollm2())
    model = AutoModelForCausalLM.from_pretrained(
        str(folder), attn_implementation=register(), dtype=torch.float32
    ).eval()
    root = Path(tempfile.mkdtemp(prefix="bench-probe-cache-"))
    entry = root / FOLDER / f"{probe_key(model)}.json"
    probed_layers(model, "llama", root=root)  # writes the entry
    assert entry.is_file()
    steps = {
        "search": lambda: probe(model, "llama"),
        "checked entry": lambda: probed_layers(model, "llama", root=root),
        "read only": lambda: read_templates(entry),
    }
    times = interleaved(steps, repeats=repeats, warmup=1)
    base = statistics.median(times["search"])
    print(
        f"SmolLM2-135M, {repeats} rounds, torch threads 1, load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(f"{'way':<15} {'median ms':>10} {'x search':>9}  rounds (ms)")
    for name, values in times.items():
        median = statistics.median(values)
        shown = " ".join(f"{v:.0f}" for v in values)
        print(f"{name:<15} {median:>10.1f} {median / base:>9.2f}  {shown}")


if __name__ == "__main__":
    main()
