"""Tests of ``retrofit``: the patcher, the estimator and the API."""
