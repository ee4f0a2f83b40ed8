"""retrofit package."""
