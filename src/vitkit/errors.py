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


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty): for one-line errors."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
