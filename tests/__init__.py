"""The tests, one folder per package (patches, retrofit, eval, hostgen); repo/ for the checkout."""
