"""Tests of the host patch tables and the O-Closure proofs on each host."""
