"""Tests of ``lab.leave_out``: interval coverage and the out-of-fold gap on a suite."""
