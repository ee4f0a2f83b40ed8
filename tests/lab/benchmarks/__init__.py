"""Tests of ``lab.benchmarks``, one file per benchmark module."""
