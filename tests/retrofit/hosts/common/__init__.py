"""Tests of ``retrofit.hosts.common``."""
