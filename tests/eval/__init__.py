"""Tests of ``eval``: benchmarks, calibration, operator reports, outputs, the console script."""
