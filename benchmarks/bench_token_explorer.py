"""The report's model explorer of SmolLM2 at one cell a token, 512 tokens, in headless chromium.

    PYTHONPATH=src python benchmarks/bench_token_explorer.py [--repeats 5] [--shots DIR]

Runs ``headlab report --model smollm2 --text-file T`` on a text of 512 SmolLM2 tokens: a passage of
prose and its repeat (so that induction heads have a copy to attend to), and reads back: the
command's wall time, the page's bytes and the model explorer's (its cells' base64), whether it is
token level, and in chromium (Debian's, software rendering) the first paint: from navigation to the
first frame after the model explorer drew its first head (median and slowest of ``--repeats`` fresh
pages). Then it opens the strongest previous-token head of the model and of layers 3 and 4, and the
induction head 18.6 (by the explorer's own decoded weights: mean weight on the key one back, and
one repeat back), screenshots each heatmap into ``--shots`` and reads the drawn pixels: the mean
green channel on the stripe's cells against the cells two to five keys beside it (viridis: dark
purple at 0, yellow at the head's largest weight).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PASSAGE = (
    "Attention lets every position of a sequence read from every earlier one. Each head "
    "scores the keys against its query, turns the scores into weights with a softmax and "
    "returns the weighted mean of the values. Some heads learn to look one position back, "
    "others find the earlier copy of the current token and read what followed it, and many "
    "spread their weight over the first token when nothing else fits. A trained model mixes "
    "these patterns across its layers, and the report shows each of them on your own text so "
    "that you can see which head does what. "
)
GREEN = """(c, cells) => {
  const m = +c.dataset.margin, cell = +c.dataset.cell, r = c.width / +c.dataset.size;
  const ctx = c.getContext('2d');
  return cells.map(([q, k]) => ctx.getImageData(Math.floor((m + (k + 0.5) * cell) * r),
    Math.floor((m + (q + 0.5) * cell) * r), 1, 1).data[1]);
}"""
FRAME = "() => new Promise((d) => requestAnimationFrame(() => d(performance.now())))"
READY = "() => document.querySelector('[data-testid=heatmap-model-0]').dataset.ready === '1'"


def period_of(tokens: list[str]) -> int:
    """The repeat's length in tokens: the first shift at which 20 tokens recur."""
    return next(p for p in range(10, len(tokens) - 25) if tokens[p + 5 : p + 25] == tokens[5:25])


def build(out: Path, text: Path) -> float:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "headlab",
            "report",
            "--model",
            "smollm2",
            "--text-file",
            str(text),
            "--out",
            str(out),
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def strongest(views: list, offset_of) -> np.ndarray:
    """(layer, head): each head's mean weight on the key ``offset_of(q)`` (skipped below 0)."""
    weights = views[0].weights  # (layer, head, q_pos, k_pos)
    n = weights.shape[-1]
    rows = np.arange(n)
    keys = np.array([offset_of(q) for q in rows])
    ok = keys >= 0
    return weights[:, :, rows[ok], keys[ok]].mean(-1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shots", type=Path, default=Path("token-explorer-shots"))
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    from headlab.results.explorers import decoded_views, explorer_bytes

    folder = Path(tempfile.mkdtemp())
    text = folder / "text.txt"
    text.write_text(PASSAGE * 12, encoding="utf-8")  # the report cuts it to 512 tokens
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)
    seconds = build(folder / "report", text)
    index = folder / "report" / "index.html"
    measured = json.loads((folder / "report" / "measurements.json").read_text())
    explorer = measured["explorers"]["model"]
    views = decoded_views(explorer)
    tokens = explorer["tokens"]
    period = period_of(tokens)
    print(
        f"report: {seconds:.0f} s; page {index.stat().st_size / 1e6:.2f} MB; model explorer "
        f"{explorer_bytes(explorer) / 1e6:.2f} MB of cells, {len(tokens)} tokens, "
        f"cells {explorer.get('cells', 'uint16 binned')}, bins {explorer['bins']}, "
        f"triangle {explorer.get('triangle')}; the passage repeats every {period} "
        "tokens"
    )
    previous = strongest(views, lambda q: q - 1)
    best = np.unravel_index(previous.argmax(), previous.shape)
    picks = [("previous-token", int(best[0]), int(best[1]), 1)]
    for layer in (3, 4):
        picks.append(("previous-token", layer, int(previous[layer].argmax()), 1))
    induction = strongest(views, lambda q: q - period + 1 if q >= period else -1)
    picks.append(("induction", 18, 6, period - 1))
    print(
        f"induction score of 18.6 here: {induction[18, 6]:.3f} (largest "
        f"{np.unravel_index(induction.argmax(), induction.shape)})"
    )
    args.shots.mkdir(parents=True, exist_ok=True)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with sync_playwright() as pw:
        flags = ["--headless", "--no-sandbox", "--disable-gpu"]
        browser = pw.chromium.launch(executable_path=chromium, args=flags)
        paints = []
        for _ in range(args.repeats):
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(index.as_uri())
            page.wait_for_function(READY)
            paints.append(page.evaluate(FRAME))
            page.close()
        print(
            f"first paint: median {statistics.median(paints):.0f} ms, slowest "
            f"{max(paints):.0f} ms over {args.repeats} pages",
            flush=True,
        )
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(index.as_uri())
        page.wait_for_function(READY)
        n = len(tokens)
        for kind, layer, head, back in picks:
            page.get_by_test_id(f"layer-model-{layer}").click()
            page.get_by_test_id(f"head-model-0-{head}").click()
            page.wait_for_function(READY)
            canvas = page.get_by_test_id("heatmap-model-0")
            rows = range(max(back, 8), n)
            on = canvas.evaluate(GREEN, [[q, q - back] for q in rows])
            beside = canvas.evaluate(
                GREEN, [[q, q - back - d] for q in rows for d in (2, 3, 4, 5) if q - back - d >= 0]
            )
            shot = args.shots / f"smollm2-512-{layer}.{head}-{kind}.png"
            canvas.screenshot(path=str(shot))
            print(
                f"{kind} head {layer}.{head} (key {back} back): green on the stripe "
                f"{np.mean(on):.0f}, beside it {np.mean(beside):.0f}; {shot}",
                flush=True,
            )
        browser.close()
    shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
