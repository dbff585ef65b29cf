"""What a fit's loop is given: a narrow, frozen view of the fit, and the interface every loop
offers the fit (:class:`FitLoop`), whatever its sync model."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..extension import RoundId
    from ..policies import Policy
    from ..programs.base import Program
    from .link import Link
    from .observe import Observers
    from .placement import Placement


@dataclass(frozen=True)
class FitOptions:
    """The engine options of a fit (see :func:`daskabsp.fit`)."""

    max_iter: int
    tol: float | None
    n_partitions: int | None
    quota: int | float | None
    chunk_target: float
    record_params: bool


@dataclass(frozen=True)
class FitContext:
    """What a loop needs of its fit.

    Attributes
    ----------
    fit_id : str
        The fit's id.
    program : Program
        The iterative program.
    policy : Policy
        The sync model.
    options : FitOptions
        The engine options.
    link : Link
        The fit's link to the cluster.
    observers : Observers
        Who watches each round or update.
    """

    fit_id: str
    program: Program
    policy: Policy
    options: FitOptions
    link: Link
    observers: Observers

    def converged(self, state, obj: float, prev: float | None) -> bool:
        """Whether the fit stops at ``state``: the program's own rule, or else the objective
        changed by at most ``tol`` (relative) since the last round (``prev``)."""
        verdict = self.program.converged(state)
        if verdict is not None:
            return bool(verdict)
        tol = self.options.tol
        return (tol is not None and prev is not None
                and abs(obj - prev) <= tol * max(abs(obj), abs(prev)))


class FitLoop(ABC):
    """The steps of one fit under a sync model: global rounds (:class:`~.loop.RoundLoop`)
    or a clock per partition (:class:`~.clock_loop.ClockLoop`).

    Parameters
    ----------
    ctx : FitContext
        The fit.
    placement : Placement
        Where its rows are.
    """

    #: What one step of the loop is, in the fit's records ("round" or "update").
    unit: ClassVar[str]

    def __init__(self, ctx: FitContext, placement: Placement) -> None:
        self.ctx = ctx
        self.placement = placement
        #: The rounds stopped at a quorum, whose times the scheduler plugin logged.
        self.rids: list[RoundId] = []

    @abstractmethod
    async def start(self) -> None:
        """Who the workers are, and where each partition runs."""

    @abstractmethod
    async def run(self, state) -> tuple[Any, bool]:
        """Step from ``state`` until the program converges, a callback stops the fit or the
        budget is spent; return the last state and whether it converged."""

    @property
    @abstractmethod
    def n_iter(self) -> int:
        """Rounds run (or, with clocks, updates per partition, rounded up)."""

    @property
    def max_steps(self) -> int:
        """The most steps the loop takes (for the watchers: rounds, or updates)."""
        return self.ctx.options.max_iter

    def attrs(self) -> dict:
        """What the fit history's attributes say of the loop."""
        return {}
