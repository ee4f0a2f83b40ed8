"""Tests of ``eval.benchmarks``, one file per benchmark module."""
