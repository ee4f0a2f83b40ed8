"""Tests of ``retrofit.hosts.v2``."""
