"""What the report shows beside the results files, measured before the report is drawn.

``measure_report`` runs the analyses the page needs (the text through a seeded layer and through
the trained model, the seed scenarios, gradient coupling, the parameter table) and returns them as
a ``headlab.results.report_measurements.ReportMeasurements``: plain data that the report writes
beside its page and draws from. ``headlab report`` calls it first, then builds the report.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from headlab.analysis.coupling import coupling_summary
from headlab.analysis.page_scenarios import seed_scenarios
from headlab.analysis.params import parameter_table
from headlab.analysis.text_attention import seeded_text_attention, words
from headlab.notices import HeadlabWarning
from headlab.results import explorers
from headlab.results.attention_views import TextAttention
from headlab.results.explorers import heatmap_data
from headlab.results.report_measurements import DEFAULT_MODEL, ReportMeasurements, ReportRequest

#: The most words of the text the report takes: the seeded layer's work grows with the square of
#: the words (4096: about 6 s on two busy cores; 100,000 words ran for minutes), and the page shows
#: every word it takes.
REPORT_MAX_WORDS = 4096


class TextCutWarning(HeadlabWarning):
    """The report cut the text, or drew a view coarser, to bound its work and its page."""


def read_report_text(path: str | Path, what: str = "--text-file") -> tuple[str, str]:
    """(the text of the file ``path`` as far as the report takes it, "cut from at least N
    bytes" when the rest was not read, else ""): streamed through the one bounded reader
    (``TextFile.read_until``), stopping once the prefix holds more than ``REPORT_MAX_WORDS``
    words, so a large file is never read whole. ValueError naming ``what`` for a file that is
    not regular, not UTF-8 or blank."""
    from headlab.results.input_files import open_text

    read = open_text(path, what).read_until(lambda prefix: len(prefix.split()) > REPORT_MAX_WORDS)
    return read.text, read.cut_note()


def first_words(text: str, count: int) -> str:
    """``text`` up to the end of its ``count``-th whitespace word, as written."""
    ends = [match.end() for match, _ in zip(re.finditer(r"\S+", text), range(count), strict=False)]
    return text[: ends[-1]] if ends else ""


def _model_attention(text: str, options: ReportRequest) -> tuple[str, TextAttention] | str:
    """(the model's name, its attention on ``text``), or why the default model could not be
    loaded (its packaged weights missing): the page then says so in one line instead of failing
    the whole report. A model the user named that cannot be loaded is an error."""
    from headlab.heads.model_text_attention import model_text_attention
    from headlab.models import load

    model_name = options.model
    try:
        model = load(
            model_name,
            backend=options.backend,
            download=options.download,
            trust_remote_code=options.trust_remote_code,
        )
    except (OSError, ValueError) as error:
        if model_name != DEFAULT_MODEL or options.backend is not None:
            raise
        return f"the model {model_name} could not be loaded: {error}"
    return model.name, model_text_attention(model, text)


def _say(message: str) -> None:
    warnings.warn(message, TextCutWarning, stacklevel=3)


def _model_explorer(name: str, attention: TextAttention, max_bins: int) -> dict:
    """The model's explorer: every layer and head at one cell a token (8-bit, deflated), or,
    when that would not fit the page's budget (``explorers.PAGE_BYTES``), binned coarser, which
    the page and a TextCutWarning say. A text
    cut to the page's or the model's limit is said on the page ("Cut to 512 of 9484 tokens: the
    page shows at most 512 of the 8192 tokens SmolLM2-135M-Instruct reads")."""
    one_head = (
        ", and the same trained weights viewed as one head per layer (every layer collapsed)"
        if len(attention.views) > 1
        else ""
    )
    note = f"Attention of {name}, every layer and head{one_head}."
    title, n = f"{name}'s heads on your text", len(attention.tokens)
    cut = {"total_tokens": attention.total_tokens, "cut_reason": attention.cut_reason}
    token_level = heatmap_data(
        title,
        attention.tokens,
        attention.views,
        token_level=True,
        **cut,
        note=note + " One cell a token, 8 bits a cell (weights below 1/510 of the head's largest "
        "show as 0).",
    )
    size = explorers.explorer_bytes(token_level)
    if size <= explorers.PAGE_BYTES:
        return token_level
    grids = [view.weights.shape[0] * view.weights.shape[1] for view in attention.views]
    bins = explorers.bins_within(sum(grids), max_bins)
    if bins < min(n, max_bins) or n > max_bins:
        per_cell = len(attention.tokens) / bins
        # the first view is the model's own heads; the others are its layers collapsed
        shown = f"{grids[0]} heads" + (
            f" and their {sum(grids[1:])} one-head views" if len(grids) > 1 else ""
        )
        note += (
            f" Binned to {bins} x {bins} cells (about {per_cell:.1f} tokens a cell) so "
            f"that its {shown} fit the page (one cell a token: "
            f"{size / 2**20:.1f} MiB)."
        )
        _say(
            f"{name}'s {shown} are binned to {bins} x {bins} cells on the page, so that the "
            f"explorer's weights take at most {explorers.PAGE_BYTES / 2**20:g} MiB"
        )
    return heatmap_data(title, attention.tokens, attention.views, note=note, max_bins=bins, **cut)


def _parameter_rows(d_model: int = 512) -> list[dict]:
    """Full multi-head rows for 1..16 heads, then 8 heads with 4, 2, 1 K/V heads (GQA, MQA)."""
    rows = parameter_table(d_model, [1, 2, 4, 8, 16]) + parameter_table(d_model, [8], [4, 2, 1])
    return [r.to_dict() for r in rows]


def measure_report(options: ReportRequest) -> ReportMeasurements:
    """Run every analysis the page shows beside the results files. ValueError for an empty text
    or a model the user named that cannot be loaded (before the other work)."""
    tokens = words(options.text)
    total_words, shown_text = len(tokens), options.text
    text_cut = total_words > REPORT_MAX_WORDS
    # A file read only as far as the report takes it: its words past those are not counted.
    has = f"more than {REPORT_MAX_WORDS}" if options.text_cut_note else str(total_words)
    read = f" (read only that far: {options.text_cut_note})" if options.text_cut_note else ""
    if text_cut:
        tokens, shown_text = tokens[:REPORT_MAX_WORDS], first_words(options.text, REPORT_MAX_WORDS)
        _say(
            f"the text has {has} words; the report takes the first {REPORT_MAX_WORDS}{read} "
            "(the seeded layer's work grows with the square of the words)"
        )
    # First: a model the user named that cannot be loaded fails before the other work.
    model = _model_attention(shown_text, options) if options.use_model else None
    text = seeded_text_attention(tokens, seed=options.seed, max_bins=options.max_bins)
    shown: dict[str, dict] = {}
    shown["text"] = heatmap_data(
        "Your text through one attention layer",
        tokens,
        text.views,
        note=(
            "Seeded embeddings of the words through a seeded headlab.MultiHeadAttention "
            "(d_model=64) and the same parameters viewed as one head."
        ),
        max_bins=options.max_bins,
        total_tokens=total_words,
        cut_reason=f"the report takes at most {REPORT_MAX_WORDS} words{read}" if text_cut else "",
    )
    if isinstance(model, tuple):
        shown["model"] = _model_explorer(*model, options.max_bins)
    scenarios = seed_scenarios(seed=options.seed)
    for i, scenario in enumerate(scenarios):
        shown[f"scenario-{i}"] = scenario.pop("heatmap")
        scenario["explorer"] = f"scenario-{i}"
    return ReportMeasurements(
        text=shown_text,
        num_tokens=len(tokens),
        total_words=total_words,
        explorers=shown,
        scenarios=scenarios,
        params=_parameter_rows(),
        coupling=coupling_summary(seed=options.seed).to_dict(),
        model_name=model[0] if isinstance(model, tuple) else None,
        model_problem=model if isinstance(model, str) else None,
    )
