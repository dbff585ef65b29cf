"""What the fitting process, the scheduler plugin and the worker plugin say to each other.

Round ids are :class:`RoundId` values in the code; on the wire (task annotations, stream
messages, handler arguments) they travel as ``str(round_id)``, which the scheduler plugin
builds from a task's annotation (:meth:`RoundId.from_annotation`) and never parses back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TypedDict

#: The name of the scheduler plugin, of the worker plugin, and of the worker's extension.
PLUGIN_NAME = "daskabsp"
#: The annotation naming a task's round:
#: ``{"fit", "round", "attempt", "phase", "quorum", "unit", "patience"}``.
ANNOTATION = "daskabsp"
#: The key prefix (``dask.utils.key_split``) of the tasks that copy a partition to a worker
#: for helpers. The scheduler plugin keeps Dask's work stealing off them: a copy stolen onto
#: the worker that holds the rows copies nothing (seen on a shaped link, where the target
#: worker looked busy next to a free transfer).
COPY_PREFIX = "daskabsp-copy"
#: Scheduler -> worker (batched stream): stop these rounds; which of these keys are idle?
STOP_OP = "daskabsp-stop"
#: Worker -> scheduler (batched stream): these keys of a stopped round were not executing.
IDLE_OP = "daskabsp-idle"
#: Scheduler -> worker (batched stream): forget the stop flags of this fit's rounds.
FORGET_OP = "daskabsp-forget"
#: Worker handler (RPC): stop these rounds (when the worker plugin's stream op is unknown).
STOP_HANDLER = "daskabsp_stop"
#: Scheduler handlers (RPC), called by the fitting process.
SETTLED_HANDLER = "daskabsp_settled"
STOP_ROUNDS_HANDLER = "daskabsp_stop_rounds"
SILENT_HANDLER = "daskabsp_silent"
STUCK_HANDLER = "daskabsp_stuck"
ROUND_INFO_HANDLER = "daskabsp_round_info"
FORGET_HANDLER = "daskabsp_forget_fit"
REPORT_HANDLER = "daskabsp_fit_report"
PAGE_STATUS_HANDLER = "daskabsp_page_status"


class SignalPath(enum.Enum):
    """How a fit's stops reach the workers (chosen once per client, see
    :func:`daskabsp.extension.ensure_plugins`)."""

    #: The scheduler plugin stops a round when its quorum has finished.
    SCHEDULER = "scheduler"
    #: The fitting process sends the stops (``daskabsp.signal: driver``).
    DRIVER = "driver"
    #: The fitting process sends the stops, and the scheduler cannot import daskabsp.
    OPAQUE = "driver-opaque"


class SettledReply(TypedDict):
    """The reply of :data:`SETTLED_HANDLER`: the round's tasks reported idle, those given
    up on (their worker went silent), as ``[key, worker]`` pairs, and the workers whose
    threads other work held when the round stopped."""

    idle: list[tuple]
    late: list[tuple]
    occupied: list[str]


class RoundTimes(TypedDict):
    """One round in the reply of :data:`ROUND_INFO_HANDLER` (scheduler clock)."""

    finished: int
    quorum_time: float | None
    last_time: float | None


class PageStatus(TypedDict):
    """The reply of :data:`PAGE_STATUS_HANDLER`."""

    page: bool
    bokeh: bool
    dashboard: bool


@dataclass(frozen=True, slots=True)
class RoundId:
    """One set of tasks that is stopped and settled together.

    Attributes
    ----------
    fit : str
        The fit's id.
    round : int
        The round's number in the fit.
    attempt : int
        0, or the retry of a round that lost a worker.
    phase : int
        0 for the partitions' own scans, 1 for the helpers that scan what they left.
    """

    fit: str
    round: int
    attempt: int = 0
    phase: int = 0

    def __str__(self) -> str:
        s = f"{self.fit}:{self.round}"
        if self.attempt or self.phase:
            s += f".{self.attempt}"
        if self.phase:
            s += f".{self.phase}"
        return s

    def annotation(self, quorum: int, unit: str = "partitions",
                   patience: float = 0.0) -> dict:
        """The task annotation of this round's tasks (``quorum`` 0: never stopped; ``unit``:
        what the quorum counts, finished ``"partitions"`` or ``"workers"``; ``patience``:
        the stop comes that many times the quorum's time after the quorum)."""
        return {"fit": self.fit, "round": self.round, "attempt": self.attempt,
                "phase": self.phase, "quorum": quorum, "unit": unit,
                "patience": float(patience)}

    @classmethod
    def from_annotation(cls, a: dict) -> RoundId:
        return cls(str(a["fit"]), int(a["round"]), int(a.get("attempt", 0)),
                   int(a.get("phase", 0)))

    def retry(self, attempt: int) -> RoundId:
        return replace(self, attempt=attempt)

    def helpers(self) -> RoundId:
        """The id of the helper phase of this round."""
        return replace(self, phase=1)

    def key_prefix(self, program: str, what: str = "") -> str:
        """The key prefix of this round's tasks (``what`` names other keys of the round)."""
        prefix = f"daskabsp-{program}{what}-{self.fit}-{self.round:05d}"
        if self.attempt:
            prefix += f"-retry{self.attempt}"
        if self.phase:
            prefix += f"-help{self.phase}"
        return prefix
