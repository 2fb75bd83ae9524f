"""The displays inside a running JupyterLab or classic Notebook (nbclassic), in headless
chromium: not a test (neither is one of headlab's dependencies), a check to run by hand where
they are installed.

A notebook of every display (the report tests' synthetic results) is executed by nbclient and
saved with its outputs; ``jupyter trust`` signs one copy, another copy is edited so that its
signature no longer holds. The front end serves both; chromium opens each, with every request that
leaves the machine aborted and recorded. Printed: the displays drawn and the summaries shown
(the trusted notebook draws every display; the untrusted one shows each summary instead), the
console errors and the requests that tried to leave.

    python benchmarks/jupyterlab_displays.py --jupyter /path/to/venv/bin/jupyter [--app nbclassic]

Results in docs/notebook.md ("Offline, in every front end").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CELLS = [
    f"import sys; sys.path.insert(0, {str(ROOT / 'tests' / 'report')!r})\n"
    "from display_samples import head_statistics, head_pattern, circuit_run, "
    "score_split_result\nfrom long_results import long_context_result, kv_budget_result\n"
    "import headlab",
    "head_statistics()",
    "head_pattern(600)",
    "long_context_result()",
    "kv_budget_result()",
    "circuit_run()",
    "score_split_result()",
]
#: Where each front end opens a notebook.
APPS = {"lab": "/lab/tree/{}.ipynb?reset", "nbclassic": "/notebooks/{}.ipynb"}
LOCAL = ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")


def write_notebooks(folder: Path, jupyter: str) -> None:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(notebook, timeout=600, kernel_name="python3").execute()
    nbformat.write(notebook, folder / "trusted.ipynb")
    subprocess.run([jupyter, "trust", str(folder / "trusted.ipynb")], check=True)
    notebook.cells[1].source += "  # edited elsewhere: its signature no longer holds"
    nbformat.write(notebook, folder / "untrusted.ipynb")


def look(url: str) -> dict:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        args = ["--headless", "--no-sandbox", "--disable-gpu"]
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=args)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        left, errors = [], []

        def route(r: object) -> None:
            if r.request.url.startswith(LOCAL):
                r.continue_()
            else:
                left.append(r.request.url)
                r.abort()

        context.route("**/*", route)
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.goto(url)
        for _ in range(60):
            found = page.locator(".hl-display").count()
            drawn = page.locator(".hl-display[data-hl-drawn]").count()
            if found >= len(CELLS) - 1 and (drawn == found or drawn == 0):
                break
            time.sleep(2)
        time.sleep(3)
        out = {
            "displays": page.locator(".hl-display").count(),
            "drawn": page.locator(".hl-display[data-hl-drawn]").count(),
            "summaries": page.locator(".hl-fallback").count(),
            "console_errors": errors,
            "requests_off_the_machine": left,
        }
        browser.close()
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jupyter", required=True, help="the jupyter executable of JupyterLab")
    parser.add_argument("--app", choices=sorted(APPS), default="lab")
    parser.add_argument("--port", type=int, default=8899)
    args = parser.parse_args(argv)
    version = subprocess.run(
        [args.jupyter, args.app, "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as folder:
        write_notebooks(Path(folder), args.jupyter)
        server = subprocess.Popen(
            [
                args.jupyter,
                args.app,
                "--no-browser",
                f"--port={args.port}",
                "--allow-root",
                "--ServerApp.token=",
                "--ServerApp.password=",
                f"--ServerApp.root_dir={folder}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(15)
            for name in ("trusted", "untrusted"):
                seen = look(f"http://127.0.0.1:{args.port}" + APPS[args.app].format(name))
                print(json.dumps({args.app: version, "notebook": name, **seen}))
        finally:
            server.terminate()
            server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
