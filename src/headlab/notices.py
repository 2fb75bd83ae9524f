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


def renamed(module: str, name: str, aliases: dict[str, object]) -> object:
    """A module's ``__getattr__`` for its old public names: ``aliases[name]`` (the object under
    its new name) with one ``DeprecationWarning`` naming both; AttributeError for any other."""
    if name not in aliases:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    import warnings

    new = getattr(aliases[name], "__name__", "?")
    warnings.warn(
        f"{module}.{name} is now {new}; the old name will be removed",
        DeprecationWarning,
        stacklevel=3,
    )
    return aliases[name]
