"""patches package."""
