"""Tests of ``eval.operators``, one file per report module."""
