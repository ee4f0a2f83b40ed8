"""Tests of ``retrofit.hosts.v3``."""
