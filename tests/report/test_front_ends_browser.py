"""A display is drawn however a notebook front end runs the scripts of its output: in place, as
JupyterLab does; apart, after inserting the output, as classic Notebook's jQuery does; or beside
it, as VS Code's built-in HTML renderer does, in a page that enforces Trusted Types. Headless
chromium, the network blocked, no console error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from display_browser import Offline, chromium
from display_samples import circuit_run, head_statistics
from long_results import kv_budget_result

from headlab.report.displays import show

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as instance:
        yield instance


@pytest.fixture(scope="module")
def displays() -> dict:
    return {
        "heads": show(head_statistics()),
        "kv": show(kv_budget_result()),
        "circuit": show(circuit_run()),
    }


def test_drawn_however_a_front_end_runs_scripts(browser, tmp_path, displays):
    """JupyterLab sets an output's HTML and runs a copy of each script in its place (so the
    display's own script finds its display); classic Notebook (jQuery) inserts it, then runs
    each script apart, in the page's head."""
    path = tmp_path / "front-ends.html"
    path.write_text(
        "<!doctype html><meta charset=utf-8><body><div id=lab></div><div id=out></div>",
        encoding="utf-8",
    )
    opened = Offline(browser, path)
    first = displays["heads"].html(code=True)  # the first output carries the code
    later = displays["kv"].html()
    drawn = opened.page.evaluate(
        """([first, later]) => {
          const runInPlace = (host) => host.querySelectorAll('script').forEach((old) => {
            const s = document.createElement('script');
            if (old.type) s.type = old.type;
            s.textContent = old.textContent; old.replaceWith(s); });
          const lab = document.getElementById('lab');
          lab.innerHTML = first; runInPlace(lab);
          const labDrawn = !!lab.querySelector('.hl-display').dataset.hlDrawn;
          const classic = document.getElementById('out');  // attached, scripts run apart
          classic.innerHTML = later;
          classic.querySelectorAll('script:not([type])').forEach((old) => {
            const s = document.createElement('script'); s.textContent = old.textContent;
            document.head.appendChild(s).remove(); });
          return [labDrawn, !!classic.querySelector('.hl-display').dataset.hlDrawn];
        }""",
        [first, later],
    )
    assert drawn == [True, True]
    opened.assert_clean()
    opened.close()


#: VS Code's built-in renderer of text/html outputs (``renderHTML`` and ``domEval`` of
#: extensions/notebook-renderers/src/index.ts in microsoft/vscode), step for step: the HTML set
#: through its Trusted Types policy on a new div, the div attached, then each script copied
#: (its text from ``innerText``, its type kept) and appended to that div and removed at once.
VS_CODE_RENDER_HTML = """(html) => {
  const policy = window.vscodePolicy || (window.vscodePolicy = trustedTypes.createPolicy(
    'notebookRenderer', { createHTML: (v) => v, createScript: (v) => v }));
  const container = document.createElement('div');
  container.className = 'output';
  document.body.appendChild(container);
  const element = document.createElement('div');
  element.innerHTML = policy.createHTML(html);
  container.appendChild(element);
  Array.from(element.getElementsByTagName('script')).forEach((node) => {
    const tag = document.createElement('script');
    tag.text = policy.createScript(node.innerText);
    for (const key of ['type', 'src', 'nonce', 'noModule', 'async']) {
      const value = node[key] || (node.getAttribute && node.getAttribute(key));
      if (value) tag.setAttribute(key, value);
    }
    element.appendChild(tag).parentNode.removeChild(tag);
  });
  return element;
}"""


def test_drawn_as_vs_codes_notebook_renderer_runs_scripts(browser, tmp_path, displays):
    """VS Code's notebooks draw text/html with the renderer above, in a page that enforces
    Trusted Types: each copied script runs beside the display, not in it, so the display's
    one-line script draws every display not drawn yet. The outputs come in either order (a
    later output before the one with the code, as when a cell above is rendered late)."""
    path = tmp_path / "vscode.html"
    path.write_text(
        "<!doctype html><meta charset=utf-8><meta http-equiv=Content-Security-Policy "
        "content=\"require-trusted-types-for 'script'; trusted-types notebookRenderer\">"
        "<body></body>",
        encoding="utf-8",
    )
    opened = Offline(browser, path)
    page = opened.page
    first = displays["heads"].html(code=True)
    later = [displays[name].html() for name in ("kv", "circuit")]
    # Trusted Types hold: a string set as HTML is refused
    refused = page.evaluate(
        "() => { try { document.body.innerHTML = '<b>x</b>'; return false; }"
        " catch (e) { return e instanceof TypeError; } }"
    )
    assert refused and all("TrustedHTML" in e for e in opened.errors), opened.errors
    opened.errors.clear()  # that refusal's own console line
    page.evaluate(VS_CODE_RENDER_HTML, later[0])  # before the drawers have come: not drawn
    assert page.eval_on_selector_all(".hl-display[data-hl-drawn]", "ds => ds.length") == 0
    page.evaluate(VS_CODE_RENDER_HTML, first)
    page.evaluate(VS_CODE_RENDER_HTML, later[1])
    drawn = page.eval_on_selector_all(
        ".hl-display", "ds => ds.map(d => [d.dataset.hlKind, !!d.dataset.hlDrawn])"
    )
    assert drawn == [["kv-budget", True], ["heads", True], ["circuit", True]]
    assert page.locator(".hl-fallback").count() == 0
    page.get_by_test_id("heads-sort-layer").click()  # it responds there too
    assert page.locator("[data-testid=heads-table] th.sorted").inner_text().startswith("layer")
    opened.assert_clean()
    opened.close()
