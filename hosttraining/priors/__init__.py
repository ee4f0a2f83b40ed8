"""The synthetic priors the hosts are trained on, and the batch stream that samples them."""
