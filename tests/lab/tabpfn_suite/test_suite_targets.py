"""tabpfn's test modules run against the shipped embedded classifier too (this folder)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from sklearn.utils.estimator_checks import check_sample_weight_equivalence_on_dense_data
from tabpfn import TabPFNClassifier

from retrofit import OTabPFNClassifier, OTabPFNRegressor, embedded_model_path
from tests.lab.tabpfn_suite import run_tabpfn_tests, suite_targets


def test_an_embedded_target_is_the_estimator_on_the_shipped_classifier():
    shipped = str(embedded_model_path("classifier"))
    plain = suite_targets.classifier_for("tabpfn-embedded", "target_tabpfn_embedded.target")
    patched = suite_targets.classifier_for("full-o-embedded", "target_full_o_embedded.target")
    assert issubclass(plain, TabPFNClassifier) and not issubclass(plain, OTabPFNClassifier)
    assert issubclass(patched, OTabPFNClassifier) and patched.__name__ == "TabPFNClassifier"
    for cls, mode in ((plain, None), (patched, "full-o")):
        defaults = inspect.signature(cls.__init__).parameters
        assert defaults["model_path"].default == shipped == cls().model_path
        assert mode is None or cls().mode == mode
    random = suite_targets.classifier_for("full-o", "target_full_o.target")
    assert random().model_path == str(suite_targets.classifier_checkpoint()) != shipped


def test_a_regressor_target_is_the_estimator_on_the_shipped_regressor_not_on_auto():
    """tabpfn's tests construct estimators with their defaults; offline that is the stand-in."""
    shipped = str(embedded_model_path())
    for target in suite_targets.TARGETS:
        cls = suite_targets.regressor_for(target, "target.target")
        assert cls().model_path == shipped
        assert issubclass(cls, OTabPFNRegressor) is (target != "tabpfn")
        assert target == "tabpfn" or cls().mode == target


def test_the_runner_runs_the_embedded_targets_by_default_on_the_classifier_module_only(
    tmp_path: Path,
):
    assert run_tabpfn_tests.DEFAULT_TARGETS == (
        *("none", "oattention", "full-o"),
        *("none-embedded", "oattention-embedded", "full-o-embedded"),
    )
    sources = {
        estimator: f"{import_line}\ndef test_one():\n    pass\n"
        for estimator, (_, import_line) in run_tabpfn_tests.TEST_MODULES.items()
    }
    run_tabpfn_tests.write_suite(sources, tmp_path, ["full-o", "full-o-embedded"])
    plain, embedded = tmp_path / "target_full_o", tmp_path / "target_full_o_embedded"
    assert {p.name for p in plain.glob("test_*.py")} == {
        "test_regressor_interface.py",
        "test_classifier_interface.py",
    }
    assert {p.name for p in embedded.glob("test_*.py")} == {"test_classifier_interface.py"}
    assignments = (embedded / "target.py").read_text().split("\n\n", 1)[1]
    assert assignments == "TabPFNClassifier = classifier_for('full-o-embedded', __name__)\n"


# expectations.SAMPLE_WEIGHT_FAILURES says the equivalence check fails in tabpfn's test
# only for its precision ("auto"); here the same targets' estimators pass it in float64.
@pytest.mark.parametrize(
    ("estimator", "target"),
    [("classifier", "full-o-embedded"), ("classifier", "oattention"), ("regressor", "full-o")],
)
def test_the_suites_weighted_estimators_pass_the_equivalence_check_in_float64(estimator, target):
    make = getattr(suite_targets, f"{estimator}_for")(target, "target.target")
    settings = {"USE_SKLEARN_16_DECIMAL_PRECISION": True} if estimator == "classifier" else {}
    tabpfn_test_estimator = make(n_estimators=2, inference_config=settings or None)
    check_sample_weight_equivalence_on_dense_data(
        make.__name__, tabpfn_test_estimator.set_params(inference_precision=torch.float64)
    )
