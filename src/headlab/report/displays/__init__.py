"""Displays of headlab's results types, the same in a notebook and in the report: offline (the
drawers travel inside the page, once), at any length (no (q_pos, k_pos) array in the page), drawn
on canvases. ``show(result, **options)`` makes one; in IPython each results type shows its own.
"""

from headlab.report.displays.display_bundle import Display, page_code, send_code_again
from headlab.report.displays.show_display import register_formatters, show

__all__ = ["Display", "page_code", "register_formatters", "send_code_again", "show"]
