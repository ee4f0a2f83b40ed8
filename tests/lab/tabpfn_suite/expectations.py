"""Which of tabpfn's regressor and classifier tests the runner leaves out or expects to fail.

Patterns are matched (``fnmatch``) against a test's name with its parameters,
e.g. ``test_get_embeddings[train]``, in the lists of its module
(:data:`EXPECTATIONS`). Everything not listed must pass, for every target.

The classifier module runs on two checkpoints (``suite_targets``): the random v3
classifier and, in the ``-embedded`` targets, the shipped embedded classifier.
On the shipped one nothing fails for plain tabpfn (``tabpfn-embedded``: 109
passed, 10 skipped, as on the random checkpoint; ``none-embedded`` the same),
and the patched modes fail exactly the tests they fail on the random
checkpoint, for the same reasons; measured with
``run_tabpfn_tests.py --modules classifier --targets tabpfn-embedded,none-embedded,
oattention-embedded,full-o-embedded`` (tabpfn 9.2.0, CPU).

Our estimators' ``fit`` takes ``sample_weight``, so scikit-learn's
``parametrize_with_checks`` in ``test_sklearn_compatible_estimator`` generates
its sample-weight checks for them, which it does not generate for tabpfn's.
Those extra checks are the one place the verdicts differ, and on purpose
(:data:`SAMPLE_WEIGHT_FAILURES`): mode ``"none"`` is tabpfn and refuses row
weights, and the patched modes run the tests' estimator at tabpfn's default
``inference_precision="auto"``, where the weighted fit is as far from the
repeated rows as a fit is from its rows in another order, above the
equivalence check's rtol 1e-7. Every such check passes in float64 in both
patched modes (``test_suite_targets.py`` runs the equivalence check on these
targets' estimators in float64).
"""

from __future__ import annotations

_DOWNLOAD = "needs downloaded TabPFN weights ({}); this machine is offline"

#: Deselected for every target: the test needs something this step cannot have.
DESELECTED: dict[str, str] = {
    "test__fit_predict__alternative_model_paths__outputs_correct_shape*": _DOWNLOAD.format(
        "every non-default checkpoint of v2 to v3.5"
    ),
    "test__fit_predict__multiple_model_paths__outputs_correct_shape*": _DOWNLOAD.format(
        "two v2 regressor checkpoints"
    ),
    "test_multiple_models_predict_different_results": _DOWNLOAD.format(
        "two v2 regressor checkpoints"
    ),
    "test__fit_preprocessors_and_with_cache_produce_equal_results*": _DOWNLOAD.format(
        "create_default_for_version of each version"
    ),
    "test__fit_preprocessors_and_with_cache_with_quantized_kv_cache__v3_family*": (
        _DOWNLOAD.format("create_default_for_version of v3, v3.5, v3.5-fast")
    ),
    "test__fit_preprocessors_and_low_memory_produce_equal_results*": _DOWNLOAD.format(
        "create_default_for_version of each version"
    ),
    "test__fit_and_predict__on_demo_dataset__r2_reasonable*": _DOWNLOAD.format(
        "create_default_for_version of each version"
    ),
    "test_onnx_exportable_cpu": _DOWNLOAD.format("v2.5"),
    "test_initialize_model_variables_regressor_sets_required_attributes": _DOWNLOAD.format(
        "tabpfn's default model, loaded by initialize_tabpfn_model('auto')"
    ),
}

#: Expected to fail: pattern -> (reason, the targets it fails for). Strict: a pass fails.
_EVERY = ("tabpfn", "none", "oattention", "full-o")
_PATCHED = ("oattention", "full-o")
EXPECTED_FAILURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "test__predict_batched__rejects_ragged": (
        "asserts that ragged datasets are refused; on a patched host the retrofit makes "
        "zero padding exact, so OTabPFNRegressor.predict_batched accepts them (the point "
        "of the ragged-batches feature); mode none keeps tabpfn's error",
        _PATCHED,
    ),
    "test__predict_batched__rejects_float64_precision": (
        "asserts that float64 batches are refused (tabpfn's fused forward cannot run "
        "them); on a patched host same-shape float64 input takes the null-padded path, "
        "which runs each dataset's stages on their own and is exact, so the same "
        "datasets give the same answer whether or not their shapes happen to agree; "
        "mode none keeps tabpfn's error",
        _PATCHED,
    ),
    "test__predict_batched__uses_fitted_target_transforms": (
        "asserts that some ensemble member has a target transform; the embedded "
        "checkpoint's inference config has none, so plain tabpfn fails it too",
        _EVERY,
    ),
}

#: tests/test_classifier_interface.py, deselected for every target.
CLASSIFIER_DESELECTED: dict[str, str] = {
    "test__fit_predict__alternative_model_paths__outputs_correct_shape*": _DOWNLOAD.format(
        "every non-default classifier checkpoint of v2 to v3.5"
    ),
    "test__fit_predict__multiple_model_paths__outputs_correct_shape*": _DOWNLOAD.format(
        "two classifier checkpoints of each version"
    ),
    "test__predict_logits__output_has_correct_properties_and_consistent_with_proba*": (
        _DOWNLOAD.format("create_default_for_version(V2_5)")
    ),
    "test_multiple_models_predict_different_logits": _DOWNLOAD.format(
        "three v2 classifier checkpoints"
    ),
    "test__fit_preprocessors_and_with_cache_produce_equal_results*": _DOWNLOAD.format(
        "create_default_for_version of each version"
    ),
    "test__fit_preprocessors_and_with_cache_with_quantized_kv_cache__v3_family*": (
        _DOWNLOAD.format("create_default_for_version of v3, v3.5, v3.5-fast")
    ),
    "test__fit_preprocessors_and_low_memory_produce_equal_results*": _DOWNLOAD.format(
        "create_default_for_version of each version"
    ),
    "test__fit_and_predict__on_demo_dataset__accuracy_reasonable*": _DOWNLOAD.format(
        "create_default_for_version of each version"
    ),
    "test_onnx_exportable_cpu": _DOWNLOAD.format("create_default_for_version(V2_5)"),
    "test_initialize_model_variables_classifier_sets_required_attributes": _DOWNLOAD.format(
        "tabpfn's default classifier, loaded by initialize_tabpfn_model('auto')"
    ),
}

#: The patched classifier targets on both checkpoints.
_PATCHED_CLASSIFIERS = (*_PATCHED, "oattention-embedded", "full-o-embedded")

#: tests/test_classifier_interface.py, expected to fail (strict), with the targets.
CLASSIFIER_EXPECTED_FAILURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "test__predict_proba_batched__rejects_ragged": (
        "asserts that ragged datasets are refused; on a patched host the retrofit makes "
        "zero padding exact, so OTabPFNClassifier.predict_proba_batched accepts them (the "
        "point of the ragged-batches feature); mode none keeps tabpfn's error",
        _PATCHED_CLASSIFIERS,
    ),
    "test__predict_proba_batched__rejects_float64_precision": (
        "asserts that float64 batches are refused (tabpfn's fused forward cannot run "
        "them); on a patched host same-shape float64 input takes the null-padded path, "
        "which is exact, as for the regressor; mode none keeps tabpfn's error",
        _PATCHED_CLASSIFIERS,
    ),
    "test__predict_proba_batched__rejects_mismatched_classes": (
        "asserts that datasets of different class sets are refused (tabpfn scores the "
        "batch with one n_classes_); on a patched host the null-padded path scores each "
        "dataset over its own classes, so same-shape datasets get what they get when a "
        "row more makes them ragged; mode none refuses them, naming the dataset",
        _PATCHED_CLASSIFIERS,
    ),
}

_NONE_TARGETS = ("none", "none-embedded")
_REFUSED = (
    "generated because OTabPFN*.fit takes sample_weight (tabpfn's fit does not, so tabpfn is "
    "not given this check); mode none is tabpfn, which has no row weights, and refuses "
    "{} in one line naming the patched modes"
)
# One of scikit-learn's generated checks in tabpfn's test; "[[]" is fnmatch's literal "[".
_CHECK = "test_sklearn_compatible_estimator[[]*-{}]"

#: scikit-learn's sample-weight checks, generated for our estimators only: pattern ->
#: (reason, targets). Both modules.
SAMPLE_WEIGHT_FAILURES: dict[str, tuple[str, tuple[str, ...]]] = {
    _CHECK.format("check_sample_weight_equivalence_on_dense_data"): (
        "generated because OTabPFN*.fit takes sample_weight; the tests' estimator runs at "
        "inference_precision='auto' (float32, or bf16 autocast on a CPU that has it), where "
        "a prediction moves with the order of the train rows by more than the check's rtol "
        "1e-7, and the check shuffles the weighted rows; in float64 it passes in both "
        "patched modes. Mode none refuses sample_weight",
        (*_PATCHED_CLASSIFIERS, *_NONE_TARGETS),
    ),
    **{
        _CHECK.format(check): (_REFUSED.format("sample_weight"), _NONE_TARGETS)
        for check in (
            "check_sample_weights_list",
            "check_sample_weights_not_an_array",
            "check_sample_weights_not_overwritten",
            "check_sample_weights_pandas_series",
            "check_sample_weights_shape",
        )
    },
}
#: The classifier's own two: class_weight, and sample weights on one class.
CLASSIFIER_WEIGHT_FAILURES: dict[str, tuple[str, tuple[str, ...]]] = {
    _CHECK.format("check_class_weight_classifiers"): (
        _REFUSED.format("class_weight"),
        _NONE_TARGETS,
    ),
    _CHECK.format("check_classifiers_one_label_sample_weights"): (
        _REFUSED.format("sample_weight"),
        _NONE_TARGETS,
    ),
}

#: Estimator -> (deselected patterns, expected failures) for its test module.
EXPECTATIONS = {
    "regressor": (DESELECTED, EXPECTED_FAILURES | SAMPLE_WEIGHT_FAILURES),
    "classifier": (
        CLASSIFIER_DESELECTED,
        CLASSIFIER_EXPECTED_FAILURES | SAMPLE_WEIGHT_FAILURES | CLASSIFIER_WEIGHT_FAILURES,
    ),
}
