"""Tests of loading: checkpoints, weights aliases, saved directories, the embedded host."""
