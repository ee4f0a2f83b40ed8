"""The lab: the project measuring itself, run from a checkout (``python -m lab COMMAND``).

Not in the wheel: the library (``patches``, ``retrofit``) and the paper's runner
(``eval``) are what ships; the lab times and checks them. One room per job:
``benchmarks`` (``bench``: OAttention against plain attention, memory,
fit+predict, ragged batches, out-of-fold prediction), ``device_checks`` (the
GPU check), ``leave_out`` (prediction-interval coverage and the out-of-fold
gap on the paper's suites), ``calibration`` (carrier scales behind the default
tau) and ``step_cost`` (what a training step of each host class costs).
"""
