"""Leave-out from one fitted context: out-of-fold predictions and prediction intervals.

``cross_val`` holds :func:`cross_val_predict` (the folds as one ragged batch on
the null-padded engine), ``transductive`` its default per-fold fit (the X side
fitted once on all rows, each fold's y side on its own train rows),
``intervals`` the interval maths (jackknife+, CV+, split conformal) on arrays,
``estimator_intervals`` the intervals of an estimator (per-fold refits).
"""

from retrofit.leave_out.cross_val import cross_val_predict

__all__ = ["cross_val_predict"]
