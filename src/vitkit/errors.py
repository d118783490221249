"""Errors a user can cause. The CLI turns each into one line and exit code 2.

Every message says what was wrong, where (file or key), and what to do about it.
"""


class VitkitError(Exception):
    """Base class for every error caused by user input (bad file, key, value)."""

    exit_code = 2


class ConfigError(VitkitError, ValueError):
    """A configuration key or value is unknown or impossible."""


class CheckpointError(VitkitError):
    """A checkpoint file is missing, corrupt, of an unknown format or does not fit the model."""


class DataError(VitkitError):
    """A dataset or image cannot be read or is inconsistent."""


class TrainingError(VitkitError):
    """A run cannot go on as configured (e.g. its loss diverged); the message says what to change."""


def shown(value: object, limit: int = 80) -> str:
    """A value as an error message quotes it: its repr, cut short (a huge or deeply nested value stays one short line)."""
    import reprlib

    cut = reprlib.Repr()
    cut.maxlevel, cut.maxlist, cut.maxdict, cut.maxstring, cut.maxother, cut.maxlong = 3, 6, 6, limit, limit, 40
    short = cut.repr(value)
    return short if len(short) <= limit else short[: limit - 3] + "..."


def key_shown(key: object) -> str:
    """A key from a user's file as an error message names it: as written when it is printable text without spaces,
    else quoted by `shown` (a newline or terminal escape in a key must not break the one-line message)."""
    if isinstance(key, str) and key and key.isprintable() and not any(ch.isspace() for ch in key):
        return key
    return shown(key)


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty): for one-line errors."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def has_control_characters(text: str) -> bool:
    """Whether `text` holds a newline, tab, NUL or terminal escape (Unicode category Cc): names read from files (class
    names) must not, as every figure and line prints them."""
    import unicodedata

    return any(unicodedata.category(ch) == "Cc" for ch in text)
