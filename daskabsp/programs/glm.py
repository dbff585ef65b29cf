"""Generalized linear models with a log link (Poisson, Gamma, Tweedie) by trust-region Newton.

A GLM of this family is a linear model whose rows' loss is a half Tweedie deviance of the
score (:func:`~daskabsp.programs.glm_losses.tweedie`): its loss, gradient and Hessian are row
sums like those of logistic regression, so the statistics, the partial rounds of A-BSP, the
pass model and the SSP/ASP aggregate of :class:`~daskabsp.programs.LinearNewton` carry over
unchanged; only the pointwise loss differs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import glm_losses
from .linear import LinearNewton

__all__ = ["GLMNewton", "check_targets", "y_range"]

#: scikit-learn's names of the losses (in its error messages).
_SKLEARN_LOSS = {1.0: "HalfPoissonLoss", 2.0: "HalfGammaLoss"}


def y_range(power: float) -> tuple[float, bool]:
    """The valid targets of the Tweedie deviance of ``power`` with a log link: ``(low,
    closed)``, ``y > low`` (``y >= low`` when closed); ``low = -inf`` for any real."""
    if power <= 0:
        return -np.inf, False
    if power < 2:
        return 0.0, True
    return 0.0, False


def check_targets(y: np.ndarray | float, power: float, minimum: float | None = None) -> None:
    """Raise scikit-learn's ``ValueError`` when a target is outside the range of the loss
    of ``power`` (``minimum``: the smallest target, if already known)."""
    low, closed = y_range(power)
    if low == -np.inf:
        return
    m = float(np.min(y)) if minimum is None else float(minimum)
    if m < low or (m == low and not closed):
        name = _SKLEARN_LOSS.get(float(power), "HalfTweedieLoss")
        raise ValueError(
            f"Some value(s) of y are out of the valid range of the loss {name!r}."
        )


@dataclass
class GLMNewton(LinearNewton):
    """A generalized linear model with a log link, ``E[y | x] = exp(x.w + b)``, by
    trust-region Newton.

    Minimises scikit-learn's GLM objective (``PoissonRegressor``, ``GammaRegressor``,
    ``TweedieRegressor(link="log")``), on the mean scale::

        sum_i s_i d(y_i, exp(z_i)) / (2 sum_i s_i) + l2 / 2 ||w||^2

    with ``d`` the unit Tweedie deviance of ``power`` (1: Poisson, 2: Gamma) and ``l2``
    scikit-learn's ``alpha``; the intercept is not penalised. Outside ``1 <= power <= 2``
    the deviance is not convex in the score; the programs' Hessian then takes each row's
    curvature clipped at zero (see :func:`~daskabsp.programs.glm_losses.tweedie`).

    Parameters
    ----------
    power : float, default=1.0
        The Tweedie power.
    l2, l2_intercept, fit_intercept, tol, max_hessian, hessian_stride, start
        See :class:`~daskabsp.programs.newton.NewtonProgram`; ``start`` is best the
        intercept at the log of the target's mean (as scikit-learn starts).
    loss, n_blocks
        Unused (set by the program: one block, the Tweedie deviance).

    Examples
    --------
    >>> import numpy as np
    >>> from daskabsp.programs import GLMNewton
    >>> prog = GLMNewton(power=1.0, l2=1e-3)
    >>> prog.name
    'poisson'
    """

    power: float = 1.0

    def __post_init__(self) -> None:
        self.loss = "tweedie"

    @property
    def quadratic(self) -> bool:  # type: ignore[override]
        return False

    @property
    def smoothed(self) -> bool:  # type: ignore[override]
        return False

    @property
    def name(self) -> str:  # type: ignore[override]
        return {1.0: "poisson", 2.0: "gamma"}.get(float(self.power), "tweedie")

    def pointwise(self):
        return glm_losses.tweedie(self.power)

    def check_input(self, X, y) -> None:
        check_targets(y, self.power)
