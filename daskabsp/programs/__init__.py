"""Iterative programs the engine runs: partition statistics and update rules.

A program's statistics are summed in the partition tasks (on the workers), its update runs on
the driver; the programs know nothing of Dask or of the engine.

* the contract: :mod:`.base`;
* gradient descent: :mod:`.logistic`;
* Newton programs: :mod:`.newton` (the class), :mod:`.newton_state` (state, round parameters,
  constants, cost model), :mod:`.newton_rounds` (the round rule), :mod:`.incremental` (under
  SSP and ASP), :mod:`.trust_region`, :mod:`.curvature`; the models :mod:`.linear`,
  :mod:`.multinomial`, :mod:`.glm` and their losses :mod:`.glm_losses`;
* L1 and elastic-net penalties: :mod:`.proximal`, with the solvers of :mod:`.l1`;
* one pass of moments, then a solve: :mod:`.gram`; principal components by subspace
  iteration: :mod:`.subspace`; Lloyd's k-means: :mod:`.kmeans`;
* what the update rules share: :mod:`.cycles` (one pass stitched from A-BSP rounds) and
  :mod:`.aggregate` (each partition's latest statistics, under SSP and ASP).
"""

from .base import PartitionStats, Program
from .cycles import CycleLedger, RoundStats
from .glm import GLMNewton
from .gram import CovarianceMoments, LeastSquaresMoments, MomentsProgram
from .kmeans import LloydKMeans, squared_distances
from .linear import LinearNewton
from .logistic import LogisticGD
from .multinomial import MultinomialNewton
from .newton import NewtonProgram, hessian_limit
from .proximal import ProximalLinear, ProximalMultinomial
from .subspace import SubspacePCA

__all__ = [
    "CovarianceMoments",
    "CycleLedger",
    "GLMNewton",
    "LeastSquaresMoments",
    "LinearNewton",
    "LloydKMeans",
    "LogisticGD",
    "MomentsProgram",
    "MultinomialNewton",
    "NewtonProgram",
    "PartitionStats",
    "Program",
    "ProximalLinear",
    "ProximalMultinomial",
    "RoundStats",
    "SubspacePCA",
    "hessian_limit",
    "squared_distances",
]
