"""Prediction of linear classifiers from their decision function."""

from __future__ import annotations

import numpy as np
from sklearn.utils.validation import check_is_fitted

from ._linear import LinearPredictMixin


class LinearClassifierPredictMixin(LinearPredictMixin):
    """``predict`` from ``decision_function``: the sign (two classes) or the argmax."""

    def _labels(self, X):
        z = self._decision(X)
        idx = (z > 0).astype(np.intp) if z.ndim == 1 else z.argmax(axis=1)
        return self.classes_[idx]

    def predict(self, X):
        """Predict class labels.

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples,)
            A dask array (lazy) when ``X`` is dask-backed.
        """
        check_is_fitted(self)
        return self._apply(X, self._labels, None, dtype=self.classes_.dtype)

    def decision_function(self, X):
        """Confidence scores: the signed distance to the hyperplane(s).

        Parameters
        ----------
        X : {array-like, sparse matrix, dask array, DataArray} of shape (n_samples, n_features)

        Returns
        -------
        ndarray or dask array of shape (n_samples,) or (n_samples, n_classes)
            One column per class, or one score (for the second class) when there are two.
        """
        check_is_fitted(self)
        n_out = None if self.coef_.shape[0] == 1 else self.coef_.shape[0]
        return self._apply(X, self._decision, n_out)
