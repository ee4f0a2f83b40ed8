"""Tests of ``hosttraining``: the tooling that trains the embedded hosts."""
