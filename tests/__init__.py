"""The tests: one folder per package (patches, retrofit, eval, hosttraining), repo/ the checkout."""
