"""Tests of ``eval.paper``: suites, execution, executors, store and report."""
