"""Many contexts of one table: out-of-fold predictions, prediction intervals, bootstraps.

``cross_val`` holds :func:`cross_val_predict` (the folds as one ragged batch on
the null-padded engine), ``transductive`` its default per-fold fit (the X side
fitted once on all rows, each fold's y side on its own train rows),
``intervals`` the interval maths (jackknife+, CV+, split conformal) on arrays,
``estimator_intervals`` the intervals of an estimator (per-fold refits),
``bootstrap`` :func:`~retrofit.leave_out.bootstrap.bootstrap_predict` (each
resample a weighted context of one ragged batch).
"""

from retrofit.leave_out.cross_val import cross_val_predict

__all__ = ["cross_val_predict"]
