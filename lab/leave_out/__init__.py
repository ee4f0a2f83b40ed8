"""The library's leave-out on the paper's suites: interval coverage and the out-of-fold gap."""
