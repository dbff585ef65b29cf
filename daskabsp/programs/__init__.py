"""Iterative programs the engine runs: partition statistics and update rules."""

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
