"""transformers' own output off while it loads a model (``quiet_loading``), for the loader and the
GGUF cache alike."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_loading(gguf: bool = False) -> Iterator[None]:
    """transformers' own output off while it loads: its progress bars ("Loading weights", and
    the GGUF reader's tqdm bar, which only the TQDM_DISABLE variable reaches) and its warnings,
    the LOAD REPORT table among them (``weights_match.say_unused`` says it in one line). They
    wrote lines of stderr on every load, also around a command's one-line refusal. ``gguf``:
    the load reads a GGUF (its reader is imported here, so that its bar is off even when no
    GGUF was read before in this process: the cache's first conversion)."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    verbosity = logging.get_verbosity()
    before = os.environ.get("TQDM_DISABLE")
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    os.environ["TQDM_DISABLE"] = "1"
    # tqdm reads TQDM_DISABLE when it is first imported (transformers imported it long before):
    # the GGUF reader's bar is turned off on the reader itself, for the load only.
    reader = "transformers.modeling_gguf_pytorch_utils"
    gguf_reader = importlib.import_module(reader) if gguf else sys.modules.get(reader)
    bar = getattr(gguf_reader, "tqdm", None)
    if bar is not None:
        gguf_reader.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf_reader.tqdm = bar
        logging.set_verbosity(verbosity)
        if shown:
            logging.enable_progress_bar()
        if before is None:
            del os.environ["TQDM_DISABLE"]
        else:
            os.environ["TQDM_DISABLE"] = before


__all__ = ["quiet_loading"]
