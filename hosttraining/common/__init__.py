"""What both training tasks share: loop and host model, in-prior suite, run files."""
