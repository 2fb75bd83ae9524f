"""The base class of headlab's warnings: what was skipped or replaced, said once, not raised.

The CLI shows each as one line, ``headlab: warning: ...``; library users filter them as usual.
"""


class HeadlabWarning(UserWarning):
    """Something headlab skipped or replaced on the way (the message names it)."""


class CacheNotice(HeadlabWarning):
    """Something was written to headlab's cache once (the message says what, where, how big)."""


class AttentionSwitched(HeadlabWarning):
    """``headlab.attach`` switched a user's transformers model to headlab's attention (said once
    per model object; the message says how to switch it back)."""
