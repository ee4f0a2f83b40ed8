"""Tests of ``hosttraining.common``: the loop, in-prior suite, optimisers, run files."""
