"""Leave-out from one fitted context: out-of-fold predictions and prediction intervals.

``intervals`` holds the interval maths (jackknife+, CV+, split conformal) on arrays.
"""
