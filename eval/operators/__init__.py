"""Operator reports: OAttention exactness and the two-block null-token ablation."""
