"""Iterative programs the engine runs: partition statistics and update rules."""

from .base import Program
from .logistic import LogisticGD

__all__ = ["LogisticGD", "Program"]
