"""Every head on one long text, from a file or the built-in copy task: ``model heads
--text-file/--max-tokens`` as one library call.

``LongTextRequest`` says what is run and checks itself before any model loads (the window must
fit in the text when it is given; the default window may not, and then the roles say so). Its
``open`` checks the text file (a regular, non-empty UTF-8 file) without reading it whole.
``long_text_run`` then reads only the start of the file the cut needs (``TextFile.read_tokens``),
or builds the copy task at the length asked, and runs ``long_text_statistics`` on it: the
statistics, heavy hitters and head roles in one streaming pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from headlab.heads.long_context import long_text_statistics
from headlab.heads.repeats import context_copy_task
from headlab.models.interface import HeadModel
from headlab.results.corpus_roles_result import RoleRequest
from headlab.results.head_roles import SINKS, WINDOW
from headlab.results.input_files import TextFile, open_text
from headlab.results.long_context_result import LongContextStatistics


@dataclass(frozen=True)
class LongTextRequest:
    """One long text: ``text_file`` (UTF-8; None: the built-in copy task, a passage placed
    early and repeated at the end), cut to ``max_tokens`` (None: the model's context), with the
    window errors of the first ``sinks`` keys plus a recent ``window`` (None: ``WINDOW``, and a
    text not longer than it gets none). ValueError naming the field, before anything loads."""

    text_file: Path | None = None
    max_tokens: int | None = None
    sinks: int = SINKS
    window: int | None = None

    def __post_init__(self) -> None:
        self.roles().check(fits=self.window is not None)  # a window given must fit the text

    def roles(self) -> RoleRequest:
        """The window and cut as the roles' request (the one check of them)."""
        window = WINDOW if self.window is None else self.window
        return RoleRequest(self.max_tokens, self.sinks, window)

    def open(self, what: str = "text_file") -> TextFile | None:
        """The text file checked, not read (None for the copy task); ``what`` names it."""
        return None if self.text_file is None else open_text(self.text_file, what)


def long_text_run(
    model: HeadModel,
    request: LongTextRequest,
    *,
    text: TextFile | None = None,
    on_layer: Callable[[int], None] | None = None,
) -> tuple[LongContextStatistics, str]:
    """(every head on the request's text, what was cut: "" or " (cut from ...: the rest was not
    read/analysed)"). ``text``: the request's file already opened (``request.open()``, checked
    before the model loaded), else it is opened now. Only the start of the file that
    ``max_tokens`` (or the model's context) keeps is read. Raises ValueError for a length beyond
    the model's context, a context too short for the copy task, or the window out of range."""
    roles = request.roles()
    limit = roles.tokens_for(model.max_positions)
    text = request.open() if text is None and request.text_file is not None else text
    read = None if text is None else text.read_tokens(model.count_tokens, limit)
    if read is None:  # the built-in long-range copy task, at the length asked
        words = context_copy_task(model, request.max_tokens, "give text_file").text
    else:
        words = read.text
    result = long_text_statistics(
        model,
        words,
        max_tokens=request.max_tokens,
        on_layer=on_layer,
        window=(roles.sinks, roles.window),
        strict_window=request.window is not None,
    )
    cut = ""
    if result.truncated:
        cut = f" (cut from at least {result.text_tokens}: the rest was not analysed)"
    if read is not None and not read.complete:
        cut = f" ({read.cut_note()}: the rest was not read)"
    return result, cut


__all__ = ["LongTextRequest", "long_text_run"]
