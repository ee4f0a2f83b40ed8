"""Tests of ``patches``: presence, OAttention and the O-closed modules."""
