"""Repository-level tests: layout, README, wheel."""
