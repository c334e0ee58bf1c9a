"""Errors a stage reports to its user as one line: the ``aligntrain`` command prints the message and exits 2.

A :class:`StageError` is a fault the user can act on (a size the data cannot fill, a missing
input), not a bug: its message names what to change, and no traceback hides it.
"""

from __future__ import annotations


class StageError(RuntimeError):
    """A stage could not do what it was asked; the message says why and what to change."""
