"""Tests of ragged batches: padding, the padded share, the ragged predict."""
