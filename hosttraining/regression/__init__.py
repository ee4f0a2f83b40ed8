"""Training the embedded regressor host: pretraining, the chain, quality, card, diagnosis."""
