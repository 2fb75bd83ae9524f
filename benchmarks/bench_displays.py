"""The displays at their largest, in headless chromium: bytes, first paint, threshold moves.

Pages, each one display with its code (as a notebook's first output carries it):
  pattern-8192   one head on 8192 tokens: the 256 x 256 overview and every weight at or above
                 the floor the 16 MiB budget allows, unrounded, in 256 x 256 tiles (synthetic
                 weights: a sink, a local band, an induction stripe, 2% noise);
                 pattern-8192-8mib: the same within 8 MiB
  roles-8192     every head's role on 8192 tokens at SmolLM2's size (30 x 9 heads) with each
                 head's blocked map and received profile (the report tests' synthetic results)
  circuit-70651  SmolLM2's whole circuits graph, every edge, the circuit's threshold first
For each: the display's bytes; first paint, from navigation to the first frame after every
display is drawn (median of ``--repeats`` fresh pages); each display's own drawing time; and for
the graph, the redraw time of threshold moves from the circuit to every edge (median, max).

    python benchmarks/bench_displays.py --repeats 5 --out display-bench.json

Results in docs/benchmarks.md ("Displays"). The values are what a reader's machine pays; the
load average is printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "report"))  # the synthetic results of the report tests

FIRST_FRAME = """() => new Promise((done) => requestAnimationFrame(() => done({
  paint: performance.now(),
  drawn: [...document.querySelectorAll('.hl-display')].map((d) => +d.dataset.ms),
})))"""
MOVE = """async (value) => {
  const slider = document.querySelector('[data-testid=circuit-threshold]');
  const canvas = document.querySelector('[data-testid=circuit-canvas]');
  const start = performance.now();
  slider.value = value; slider.dispatchEvent(new Event('input'));
  await new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)));
  return {value, shown: +canvas.dataset.shown, draw_ms: +canvas.dataset.ms,
          frame_ms: performance.now() - start};
}"""


def pages(folder: Path, only: list[str]) -> dict[str, Path]:
    from display_samples import circuit_run, head_pattern
    from long_results import long_context_result

    from headlab.report.displays import show

    makers = {
        "pattern-8192": lambda: head_pattern(8192),
        "pattern-8192-8mib": lambda: head_pattern(8192, budget=8 * 2**20),
        "roles-8192": long_context_result,
        "circuit-70651": circuit_run,
    }
    out = {}
    for name, make in makers.items():
        if only and name not in only:
            continue
        html = show(make()).html(code=True)
        path = folder / f"{name}.html"
        path.write_text(f"<!doctype html><meta charset=utf-8><body>{html}", encoding="utf-8")
        out[name] = path
    return out


def measure(paths: dict[str, Path], repeats: int) -> list[dict]:
    from playwright.sync_api import sync_playwright

    rows = []
    with sync_playwright() as pw:
        args = ["--headless", "--no-sandbox", "--disable-gpu"]
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        for name, path in paths.items():
            paints, draws, moves = [], [], []
            for _ in range(repeats):
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(path.as_uri(), wait_until="load")
                first = page.evaluate(FIRST_FRAME)
                paints.append(first["paint"])
                draws.append(max(first["drawn"]))
                if name.startswith("circuit"):
                    moves += [page.evaluate(MOVE, v) for v in (900, 700, 500, 300, 100, 0)]
                page.close()
            row = {
                "page": name,
                "mb": round(path.stat().st_size / 1e6, 2),
                "first_paint_ms": round(statistics.median(paints)),
                "first_paint_max_ms": round(max(paints)),
                "draw_ms": round(statistics.median(draws)),
            }
            if moves:
                frames = [m["frame_ms"] for m in moves]
                every = [m["frame_ms"] for m in moves if m["shown"] == moves[-1]["shown"]]
                row |= {
                    "move_median_ms": round(statistics.median(frames)),
                    "move_max_ms": round(max(frames)),
                    "every_edge_ms": round(max(every)),
                }
            rows.append(row)
        browser.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--pages", nargs="*", default=[], help="only these pages (default all)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        before = os.getloadavg()
        rows = measure(pages(Path(folder), args.pages), args.repeats)
        after = os.getloadavg()
    for row in rows:
        print(json.dumps(row))
    load = f"load average {before[0]:.1f} before, {after[0]:.1f} after"
    print(load)
    if args.out is not None:
        args.out.write_text(json.dumps({"rows": rows, "load": load}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
