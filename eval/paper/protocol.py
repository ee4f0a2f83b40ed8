"""The paper's evaluation protocol in constants: suites, variants, the sweep.

Light on purpose (no numpy, torch or tabpfn): the command line builds its
parsers from these names.
"""

from __future__ import annotations

from retrofit.settings import DEFAULT_SETTINGS, MODES

__all__ = [
    "DEFAULT_EPS_DEN",
    "DEFAULT_MODES",
    "DEFAULT_SUPPORT",
    "METRICS",
    "PAPER_MEAN_DELTA_PCT",
    "SUITE_SOURCE",
    "SUITE_TASK",
    "SWEEP_TAUS",
]

#: Variants: unpatched host, hidden-carrier OAttention retrofit, Full-O retrofit.
DEFAULT_MODES: tuple[str, ...] = MODES
#: Default support rule and denominator floor: the library's. The default tau is
#: the host's (``retrofit.settings.default_tau``), resolved per checkpoint by
#: :func:`eval.paper.spec.host_default_tau`, as every other entry point does.
DEFAULT_SUPPORT: str = DEFAULT_SETTINGS["support"]
DEFAULT_EPS_DEN: float = DEFAULT_SETTINGS["eps_den"]

#: Tau values of ``--sweep``: six orders of magnitude around the default.
SWEEP_TAUS: tuple[float, ...] = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)

#: The paper's mean relative RMSE change (%), 18 cases, real TabPFN v3 weights.
PAPER_MEAN_DELTA_PCT: dict[str, float] = {"oattention": 0.088, "full-o": 0.177}

#: Each suite and where its data comes from (``eval.paper.datasets``).
SUITE_SOURCE: dict[str, str] = {
    "offline18": "offline",
    "openml18": "openml",
    "offline_cls6": "offline",
}

#: What each suite's host predicts: the runner's estimator and metrics follow it.
SUITE_TASK: dict[str, str] = {
    "offline18": "regression",
    "openml18": "regression",
    "offline_cls6": "classification",
}

#: The metrics a run of each task measures (the fields of its stored record).
METRICS: dict[str, tuple[str, ...]] = {
    "regression": ("rmse", "mae"),
    "classification": ("log_loss", "accuracy", "roc_auc"),
}
