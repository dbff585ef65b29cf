"""scikit-learn estimators whose fits run on the daskabsp engine.

Swap ``from sklearn.linear_model import LogisticRegression`` for
``from daskabsp.estimators import LogisticRegression``: parameters, fitted attributes and
methods follow scikit-learn's, and every estimator also takes the engine's options (``sync``,
``n_partitions``, ``quota``, ``chunk_target``). Fits use the current Dask client, or start an
embedded ``LocalCluster``.
"""

from ._elastic_net import ElasticNet, Lasso
from ._glm import GammaRegressor, PoissonRegressor, TweedieRegressor
from ._kmeans import KMeans
from ._least_squares import LinearRegression
from ._logistic import LogisticRegression
from ._pca import PCA
from ._ridge import Ridge
from ._svm import LinearSVC
from ._validation import InvalidParameterError

__all__ = [
    "PCA",
    "ElasticNet",
    "GammaRegressor",
    "InvalidParameterError",
    "KMeans",
    "Lasso",
    "LinearRegression",
    "LinearSVC",
    "LogisticRegression",
    "PoissonRegressor",
    "Ridge",
    "TweedieRegressor",
]
