"""Training the embedded classifier host: train, quality, card, curve, temperature."""
