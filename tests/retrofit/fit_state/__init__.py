"""Tests of ``retrofit.fit_state``: the fit-state file of both estimators."""
