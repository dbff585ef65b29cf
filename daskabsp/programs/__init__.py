"""Iterative programs the engine runs: partition statistics and update rules."""

from .base import PartitionStats, Program
from .cycles import CycleLedger, RoundStats
from .kmeans import LloydKMeans, squared_distances
from .linear import LinearNewton
from .logistic import LogisticGD
from .multinomial import MultinomialNewton
from .newton import NewtonProgram, hessian_limit

__all__ = [
    "CycleLedger",
    "LinearNewton",
    "LloydKMeans",
    "LogisticGD",
    "MultinomialNewton",
    "NewtonProgram",
    "PartitionStats",
    "Program",
    "RoundStats",
    "hessian_limit",
    "squared_distances",
]
