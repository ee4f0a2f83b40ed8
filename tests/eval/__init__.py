"""Tests of ``eval``, the paper's runner: suites, execution, reports, operator reports, commands."""
