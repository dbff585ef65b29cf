"""What the engine did on its own during a fit, and why: a piece dropped, a partition given
up on, a round retried, rows moved. Each note is logged and kept until the round (or update)
it happened in is recorded, so the fit history says it too (its ``events`` variable)."""

from __future__ import annotations

import logging


class Journal:
    """The notes of one fit since its last recorded round."""

    def __init__(self) -> None:
        self._notes: list[str] = []

    def note(self, log: logging.Logger, level: int, msg: str, *args) -> None:
        """Log ``msg % args`` on ``log`` at ``level`` and keep it for the round's record."""
        log.log(level, "daskabsp: " + msg, *args)
        self._notes.append(msg % args if args else msg)

    def take(self) -> str:
        """The notes since the last call, joined ("" if none), and forget them."""
        out, self._notes = "; ".join(self._notes), []
        return out
