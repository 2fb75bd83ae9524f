"""What the report asks for (``ReportRequest``) and what it shows beside the results files, as
measured before it is drawn (``ReportMeasurements``, the ``report-measurements`` file).

The report only renders: ``headlab report`` first measures through the library
(``headlab.analysis.report_measuring.measure_report``: the text through a seeded layer and through
the trained model, the seed scenarios, gradient coupling, the parameter table), then the report
writes these measurements into its own folder (``measurements.json`` beside ``index.html``) and
draws the page from that file and from the results folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from headlab.results.binning import MAX_BINS
from headlab.results.comparison_result import ComparisonResult
from headlab.results.coupling_result import CouplingSummary
from headlab.results.defaults import DEFAULT_TEXT
from headlab.results.explorers import check_explorer
from headlab.results.locations import RESULTS_DIR
from headlab.results.param_rows import ParamRow
from headlab.results.schema import Fields, problem
from headlab.results.summary_repr import summarised

DEFAULT_MODEL = "minilm"


@dataclass(frozen=True)
class ReportRequest:
    """What goes into a report: the text for the heatmaps, where results files are, the seed."""

    text: str = DEFAULT_TEXT
    results: Path = RESULTS_DIR
    seed: int = 0
    max_bins: int = MAX_BINS
    use_model: bool = True
    #: The trained model whose heads are shown on the text: a name of ``headlab.models.load``
    #: ("minilm", "smollm2"), a path or a hub id, and how it is loaded (``load``'s options).
    model: str = DEFAULT_MODEL
    backend: str | None = None
    download: bool = False
    trust_remote_code: bool = False
    #: The file ``text`` was read from, if any: an input, like ``results`` and a model path.
    text_file: Path | None = None
    #: "cut from at least N bytes" when ``text`` is the start of ``text_file``, read only as far
    #: as the report takes it (``read_report_text``); "" for a whole text.
    text_cut_note: str = ""

    def inputs(self) -> tuple[Path, ...]:
        """Every path the report reads: a folder holding one is never replaced by the report."""
        model = Path(self.model)
        paths = (self.results, self.text_file, model if model.exists() else None)
        return tuple(Path(p) for p in paths if p is not None)


SCENARIO_TEXTS = ("name", "question", "command", "explanation", "explorer")


@summarised
@dataclass(frozen=True)
class ReportMeasurements:
    """What the page shows that no results file holds.

    text: the text as shown (its first ``num_tokens`` words of ``total_words``); explorers: the
    heatmap explorers by name ("text", "model" when a model was shown, "scenario-<i>"), each as
    ``headlab.results.explorers.heatmap_data`` gives it; model_name, or model_problem (why the
    default model could not be loaded); scenarios: the seed scenarios, each naming its explorer,
    its "result" a ``ComparisonResult`` document; params: the parameter table's rows
    (``ParamRow.to_dict()``); coupling: ``CouplingSummary.to_dict()``. ``from_dict`` reads each
    through its type's ``from_dict`` and keeps the documents as they are.
    """

    KIND: ClassVar[str] = "report-measurements"

    text: str
    num_tokens: int
    total_words: int
    explorers: dict[str, dict]
    scenarios: list[dict] = field(default_factory=list)
    params: list[dict] = field(default_factory=list)
    coupling: dict = field(default_factory=dict)
    model_name: str | None = None
    model_problem: str | None = None

    @property
    def text_cut(self) -> bool:
        return self.total_words > self.num_tokens

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "num_tokens": self.num_tokens,
            "total_words": self.total_words,
            "model_name": self.model_name,
            "model_problem": self.model_problem,
            "explorers": self.explorers,
            "scenarios": self.scenarios,
            "params": self.params,
            "coupling": self.coupling,
        }

    @classmethod
    def from_dict(cls, data: dict, where: str = "report-measurements") -> ReportMeasurements:
        """The inverse of ``to_dict``; ValueError naming the field that does not fit."""
        f = Fields(data, where)
        num_tokens = f.int("num_tokens", 1)
        explorers = f.object("explorers", nonempty=True)
        checked = {name: check_explorer(explorers.object(name)) for name in explorers.data}
        if "text" not in checked:
            raise problem(explorers.where, "an explorer named text", sorted(checked))
        scenarios = f.objects("scenarios")
        for scenario in scenarios:
            for key in SCENARIO_TEXTS:
                scenario.str(key)
            if scenario.data["explorer"] not in checked:
                raise problem(
                    scenario.at("explorer"), "the name of an explorer", scenario.data["explorer"]
                )
            ComparisonResult.from_dict(scenario.object("result").data, scenario.at("result"))
        coupling = f.object("coupling", nonempty=True)
        coupling.objects("matrices", nonempty=True)
        CouplingSummary.from_dict(coupling.data, f.at("coupling"))
        names = [
            None if data.get(key) is None else f.str(key) for key in ("model_name", "model_problem")
        ]
        params = f.objects("params")
        for row in params:
            ParamRow.from_dict(row)  # checked; the page keeps the document as it is
        return cls(
            f.text("text"),
            num_tokens,
            f.int("total_words", num_tokens),
            checked,
            [s.data for s in scenarios],
            [row.data for row in params],
            coupling.data,
            *names,
        )


def __getattr__(name: str) -> object:
    """``ReportOptions``, the old name of ``ReportRequest`` (deprecated; docs name the new one)."""
    from headlab.notices import renamed

    return renamed(__name__, name, {"ReportOptions": ReportRequest})
