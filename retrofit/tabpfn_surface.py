"""Every private tabpfn name the retrofit uses, resolved once, in one place.

tabpfn's internals move between releases. Each name here is looked up when
this module is imported; a name the installed tabpfn lacks is replaced by a
stand-in that raises :class:`~retrofit.errors.TabPFNInternalsError` (one line
naming the name, the feature that needs it and the installed tabpfn version)
when used, so a missing helper breaks only the feature that uses it, never
``import retrofit``. ``tests/retrofit/test_tabpfn_private_api.py`` pins every name here
(signature and source digest) against tabpfn 9.2.0.

Four kinds of names:

* :data:`PRIVATE_NAMES`: functions and values imported from tabpfn modules
  (the helpers of ragged ``predict_batched``, the model-cache probe, the
  architecture name of a fit state's in-memory model and an ensemble member's
  label transform for transductive leave-out, the mean imputer and the
  importance-ranking size that the weighted preprocessing reads, tabpfn's
  three inference engines that a weighted fit subclasses, and the v2
  family's encoder steps and v3.5's ECDF key that row weights fit weighted
  statistics for), each
  available here under the name without its leading underscore;
* :data:`PRIVATE_METHODS`: private methods and attributes of tabpfn's classes
  that the retrofit calls, overrides (``retrofit/estimator_base.py`` for both
  estimators, ``retrofit/regressor.py``, ``retrofit/classifier.py``,
  ``retrofit/hosts/v3/icl_host.py``, ``retrofit/hosts/v2/model.py``, the
  weighted preprocessing steps of ``retrofit/weighted_preprocessing/``, the
  weighted fit's hooks and engines of ``retrofit/weighted_fit/``) or reads
  (the hosts' ICL stages, the fits whose formulas the weighted ones re-derive);
  the regressor's are called through the functions at the end of this module;
* :data:`PRIVATE_ATTRIBUTES`: private attributes of tabpfn's objects that
  the retrofit reads (an ensemble member's model index, v3's NaN guard);
* :data:`PRIVATE_MODULES`: tabpfn modules whose contents are internal to
  tabpfn's own ``predict``; only this module imports from them
  (``tests/repo/test_layout.py`` checks).
"""

from __future__ import annotations

import importlib
from typing import Any

from retrofit.errors import TabPFNInternalsError
from retrofit.versions import package_versions

__all__ = [
    "PRIVATE_ATTRIBUTES",
    "PRIVATE_METHODS",
    "PRIVATE_MODULES",
    "PRIVATE_NAMES",
    "RAGGED_BATCHING",
    "ROW_WEIGHTS",
    "TABPFN_VERSION",
    "TRANSDUCTIVE_LEAVE_OUT",
    "WEIGHTED_FIT",
    "MissingTabPFNName",
    "batch_member_inputs",
    "check_input_shape_matches",
    "clean_data_transform",
    "decode_batched_dataset",
    "default_save_peak_memory_factor",
    "ecdf_context_key",
    "ensure_compatible_predict_input_sklearn",
    "estimator_batch_budget",
    "feature_modality",
    "get_autocast_context",
    "get_built_model_cache_size",
    "handle_constant_target",
    "inference_engine_cache_preprocessing",
    "inference_engine_explicit_kv_cache",
    "inference_engine_on_demand",
    "maybe_run_gpu_preprocessing",
    "member_model_index",
    "members_per_forward",
    "missing_names",
    "models_may_be_shared",
    "no_inverse_imputer",
    "prepare_model_inputs",
    "require",
    "resolve_architecture_name",
    "resolve_importance_top_k",
    "should_save_peak_mem",
    "transform_labels_one",
    "translate_batched_logits",
    "usable_output_types",
    "uses_majority_downsample",
    "v2_constant_feature_mask",
    "v2_fit_feature_group_scaling",
    "v2_remove_constant_features",
    "v2p5_normalize_feature_groups",
    "v2p5_pad_and_reshape_feature_groups",
    "v2p5_remove_constant_features",
    "v2p6_normalize_feature_groups",
    "v2p6_pad_and_reshape_feature_groups",
    "v2p6_remove_constant_features",
    "validate_num_classes",
]

#: The feature that the helpers of ragged batching serve (named in the error).
RAGGED_BATCHING = "ragged predict_batched"

#: The feature that fits each fold's y side over a shared X side (named in the error).
TRANSDUCTIVE_LEAVE_OUT = "cross_val_predict(preprocessing='transductive')"

#: The feature that fits tabpfn's preprocessing with row weights (named in the error).
WEIGHTED_FIT = "fit(sample_weight=...)"

#: The feature whose weighted in-model statistics need the hosts' private helpers.
ROW_WEIGHTS = "retrofit.row_weights"

#: tabpfn modules internal to its ``predict``; import from them only here.
PRIVATE_MODULES: tuple[str, ...] = (
    "tabpfn.inference",
    "tabpfn.memory",
    "tabpfn.preprocessing.clean",
    "tabpfn.validation",
)

#: Name here -> (tabpfn module, name there, the feature that needs it).
PRIVATE_NAMES: dict[str, tuple[str, str, str]] = {
    "batch_member_inputs": ("tabpfn.inference", "_batch_member_inputs", RAGGED_BATCHING),
    "estimator_batch_budget": ("tabpfn.inference", "_estimator_batch_budget", RAGGED_BATCHING),
    "maybe_run_gpu_preprocessing": (
        "tabpfn.inference",
        "_maybe_run_gpu_preprocessing",
        RAGGED_BATCHING,
    ),
    "members_per_forward": ("tabpfn.inference", "_members_per_forward", RAGGED_BATCHING),
    "prepare_model_inputs": ("tabpfn.inference", "_prepare_model_inputs", RAGGED_BATCHING),
    "usable_output_types": ("tabpfn.regressor", "_USABLE_OUTPUT_TYPES", RAGGED_BATCHING),
    "should_save_peak_mem": ("tabpfn.memory", "should_save_peak_mem", RAGGED_BATCHING),
    "clean_data_transform": ("tabpfn.preprocessing.clean", "clean_data_transform", RAGGED_BATCHING),
    "feature_modality": ("tabpfn.preprocessing.datamodel", "FeatureModality", RAGGED_BATCHING),
    "get_autocast_context": ("tabpfn.utils", "get_autocast_context", RAGGED_BATCHING),
    "check_input_shape_matches": (
        "tabpfn.validation",
        "check_input_shape_matches",
        RAGGED_BATCHING,
    ),
    "ensure_compatible_predict_input_sklearn": (
        "tabpfn.validation",
        "ensure_compatible_predict_input_sklearn",
        RAGGED_BATCHING,
    ),
    # fit's class-count check, applied again with the model's own class limit.
    "validate_num_classes": ("tabpfn.validation", "validate_num_classes", RAGGED_BATCHING),
    "default_save_peak_memory_factor": (
        "tabpfn.constants",
        "DEFAULT_SAVE_PEAK_MEMORY_FACTOR",
        RAGGED_BATCHING,
    ),
    "get_built_model_cache_size": (
        "tabpfn.model_loading",
        "_get_built_model_cache_size",
        "model loading",
    ),
    "resolve_architecture_name": (
        "tabpfn.model_loading",
        "_resolve_architecture_name",
        "fit states of ModelSpecs models",
    ),
    # fit's y side of one ensemble member: a regressor's target transform, a
    # classifier's class permutation.
    "transform_labels_one": (
        "tabpfn.preprocessing.transform",
        "_transform_labels_one",
        TRANSDUCTIVE_LEAVE_OUT,
    ),
    # The mean imputer of tabpfn's safe scalers: its weighted counterpart subclasses it.
    "no_inverse_imputer": ("tabpfn.preprocessing.steps.utils", "_NoInverseImputer", WEIGHTED_FIT),
    # The inference engines of fit_mode "low_memory", "fit_preprocessors" and
    # "fit_with_cache": a weighted fit runs subclasses whose forwards carry each
    # member's row weights (retrofit/weighted_fit/engines.py).
    "inference_engine_on_demand": ("tabpfn.inference", "InferenceEngineOnDemand", WEIGHTED_FIT),
    "inference_engine_cache_preprocessing": (
        "tabpfn.inference",
        "InferenceEngineCachePreprocessing",
        WEIGHTED_FIT,
    ),
    "inference_engine_explicit_kv_cache": (
        "tabpfn.inference",
        "InferenceEngineExplicitKVCache",
        WEIGHTED_FIT,
    ),
    # How many features an importance ranking keeps (row weights refuse the ranking).
    "resolve_importance_top_k": (
        "tabpfn.preprocessing.ensemble",
        "_resolve_importance_top_k",
        WEIGHTED_FIT,
    ),
    # The v2 family's feature encoder, step by step, so its statistics can be fitted
    # weighted and handed back as the host's own cache (retrofit/hosts/v2/model.py).
    "v2_constant_feature_mask": (
        "tabpfn.architectures.tabpfn_v2",
        "_constant_feature_mask",
        ROW_WEIGHTS,
    ),
    "v2_remove_constant_features": (
        "tabpfn.architectures.tabpfn_v2",
        "_remove_constant_features",
        ROW_WEIGHTS,
    ),
    "v2_fit_feature_group_scaling": (
        "tabpfn.architectures.tabpfn_v2",
        "_fit_feature_group_scaling",
        ROW_WEIGHTS,
    ),
    "v2p5_remove_constant_features": (
        "tabpfn.architectures.tabpfn_v2_5",
        "_remove_constant_features",
        ROW_WEIGHTS,
    ),
    "v2p5_pad_and_reshape_feature_groups": (
        "tabpfn.architectures.tabpfn_v2_5",
        "_pad_and_reshape_feature_groups",
        ROW_WEIGHTS,
    ),
    "v2p5_normalize_feature_groups": (
        "tabpfn.architectures.tabpfn_v2_5",
        "_normalize_feature_groups",
        ROW_WEIGHTS,
    ),
    "v2p6_remove_constant_features": (
        "tabpfn.architectures.tabpfn_v2_6",
        "_remove_constant_features",
        ROW_WEIGHTS,
    ),
    "v2p6_pad_and_reshape_feature_groups": (
        "tabpfn.architectures.tabpfn_v2_6",
        "_pad_and_reshape_feature_groups",
        ROW_WEIGHTS,
    ),
    "v2p6_normalize_feature_groups": (
        "tabpfn.architectures.tabpfn_v2_6",
        "_normalize_feature_groups",
        ROW_WEIGHTS,
    ),
    # Where v3.5's scaler statistics carry the ECDF ranking context.
    "ecdf_context_key": ("tabpfn.architectures.tabpfn_v3_5", "_ECDF_CONTEXT_KEY", ROW_WEIGHTS),
}

#: ``module.Class`` -> the private methods and attributes the retrofit relies on.
PRIVATE_METHODS: dict[str, tuple[str, ...]] = {
    "tabpfn.regressor.TabPFNRegressor": (
        "_initialize_model_variables",  # overridden by OTabPFNRegressor
        "_get_tuning_regressor",  # overridden by OTabPFNRegressor
        # A weighted fit (retrofit/weighted_fit/estimator.py) overrides these three
        # around tabpfn's own fit, whose order of calls it relies on, and calls the fourth.
        "fit",
        "_initialize_dataset_preprocessing",
        "_build_ensemble_preprocessor_and_executor",
        "_compute_downsample_correction",
        "_rebuild_raw_space_bardist",
        "_uses_majority_downsample",
        "_handle_constant_target",
        "_translate_batched_logits",
        "_decode_batched_dataset",
    ),
    "tabpfn.classifier.TabPFNClassifier": (
        "_initialize_model_variables",  # overridden by OTabPFNClassifier
        "_get_tuning_classifier",  # overridden by OTabPFNClassifier
        # A weighted fit overrides these two around tabpfn's own fit (its order of calls).
        "fit",
        "_initialize_dataset_preprocessing",
        "_compute_downsample_correction",
        "_uses_majority_downsample",  # ragged predict_proba_batched refuses it
        # Public, but ragged predict_proba_batched relies on its inside: it hands
        # the fitted worker an executor_ whose iter_outputs replays the padded
        # outputs, and forward post-processes them (retrofit/batching/classification.py).
        "forward",
    ),
    # A weighted fit's engines run each member's forwards under its row weights.
    "tabpfn.inference.InferenceEngineOnDemand": ("_call_model",),
    "tabpfn.inference.InferenceEngineCachePreprocessing": ("_call_model",),
    "tabpfn.inference.InferenceEngineExplicitKVCache": ("_build_cache",),
    "tabpfn.architectures.tabpfn_v2.TabPFNV2": (
        "_pad_and_group_features",
        "_embed_targets",
        "_embed_features",
        "_embed_nan_target",
        "_decode",
    ),
    "tabpfn.architectures.tabpfn_v2_5.TabPFNV2p5": (
        "_preprocess_and_embed_features",
        "_preprocess_and_embed_targets",
        "_decode",
    ),
    "tabpfn.architectures.tabpfn_v2_6.TabPFNV2p6": (
        "_preprocess_and_embed_features",
        "_preprocess_and_embed_targets",
        "_decode",
    ),
    # Row weights (retrofit/weighted_preprocessing/): the steps' fits overridden, and
    # the public fits whose formulas the weighted ones re-derive (a change is re-checked).
    "tabpfn.preprocessing.steps.reshape_feature_distribution_step."
    "ReshapeFeatureDistributionsStep": (
        "_create_transformers_and_new_schema",  # overridden: sized by sum w, fitted weighted
    ),
    "tabpfn.preprocessing.steps.encode_categorical_features_step.EncodeCategoricalFeaturesStep": (
        "_get_transformer",  # overridden: the common-category filters count sum w
        "_fit_transform_internal",  # its one-hot size guard is redone on sum w rows
    ),
    "tabpfn.preprocessing.steps.add_svd_features_step.AddSVDFeaturesStep": ("_fit",),
    "tabpfn.preprocessing.steps.add_fingerprint_features_step.AddFingerprintFeaturesStep": (
        "_fit",
    ),
    "tabpfn.preprocessing.steps.safe_power_transformer.SafePowerTransformer": (
        "_yeo_johnson_optimize",
    ),
    "tabpfn.preprocessing.steps.squashing_scaler_transformer.SquashingScaler": ("fit",),
    "tabpfn.preprocessing.steps.adaptive_quantile_transformer.AdaptiveQuantileTransformer": (
        "fit",
    ),
    "tabpfn.preprocessing.steps.kdi_transformer.KDITransformerWithNaN": ("fit",),
    "tabpfn.preprocessing.torch.steps.TorchSoftClipOutliersStep": ("_fit",),
    "tabpfn.preprocessing.torch.torch_soft_clip_outliers.TorchSoftClipOutliers": ("fit",),
    "tabpfn.preprocessing.ensemble.TabPFNEnsemblePreprocessor": (
        "__init__",  # called with the weighted row count; its sampler draws on it
        "fit_transform_ensemble_members_iterator",  # overridden: members fitted weighted
    ),
    "tabpfn.architectures.tabpfn_v3.TabPFNV3": (
        "_stages_0_to_2",
        "_prepare_y",
        "_embed_icl_y",
        "_preprocess_raw",
    ),
    "tabpfn.architectures.tabpfn_v3_5.TabPFNV3p5": (
        "_stages_0_to_2",
        "_prepare_y",
        "_embed_icl_y",
        "_preprocess_raw",
    ),
}


#: ``module.Class`` -> private instance attributes or fields the retrofit reads.
PRIVATE_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "tabpfn.architectures.tabpfn_v3.TabPFNV3": ("_nan_safe_output",),
    "tabpfn.architectures.tabpfn_v3_5.TabPFNV3p5": ("_nan_safe_output",),
    "tabpfn.preprocessing.configs.EnsembleConfig": ("_model_index",),
}


#: The installed tabpfn's version, as error messages and patch reports name it.
TABPFN_VERSION = package_versions(["tabpfn"])["tabpfn"]


class MissingTabPFNName:
    """Stands in for a private tabpfn name the installed tabpfn lacks; any use raises."""

    def __init__(self, module: str, name: str, feature: str) -> None:
        self.module = module
        self.name = name
        self.feature = feature

    def error(self) -> TabPFNInternalsError:
        """The one-line error a use of this name raises."""
        return TabPFNInternalsError(
            f"{self.feature} needs {self.module}.{self.name}, which tabpfn {TABPFN_VERSION} "
            "lacks (tabpfn-retrofit supports tabpfn 9.2.x)"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Raises :meth:`error`: the name is missing."""
        raise self.error()

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise self.error()

    def __contains__(self, item: Any) -> bool:
        raise self.error()

    def __repr__(self) -> str:
        return f"<missing {self.module}.{self.name}>"


def _resolve(name: str) -> Any:
    # A dynamic import, so that a tabpfn module that moved is one missing name too.
    module, attr, feature = PRIVATE_NAMES[name]
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return MissingTabPFNName(module, attr, feature)


batch_member_inputs = _resolve("batch_member_inputs")
estimator_batch_budget = _resolve("estimator_batch_budget")
maybe_run_gpu_preprocessing = _resolve("maybe_run_gpu_preprocessing")
members_per_forward = _resolve("members_per_forward")
prepare_model_inputs = _resolve("prepare_model_inputs")
usable_output_types = _resolve("usable_output_types")
should_save_peak_mem = _resolve("should_save_peak_mem")
clean_data_transform = _resolve("clean_data_transform")
feature_modality = _resolve("feature_modality")
get_autocast_context = _resolve("get_autocast_context")
check_input_shape_matches = _resolve("check_input_shape_matches")
ensure_compatible_predict_input_sklearn = _resolve("ensure_compatible_predict_input_sklearn")
validate_num_classes = _resolve("validate_num_classes")
default_save_peak_memory_factor = _resolve("default_save_peak_memory_factor")
get_built_model_cache_size = _resolve("get_built_model_cache_size")
resolve_architecture_name = _resolve("resolve_architecture_name")
transform_labels_one = _resolve("transform_labels_one")
no_inverse_imputer = _resolve("no_inverse_imputer")
resolve_importance_top_k = _resolve("resolve_importance_top_k")
inference_engine_on_demand = _resolve("inference_engine_on_demand")
inference_engine_cache_preprocessing = _resolve("inference_engine_cache_preprocessing")
inference_engine_explicit_kv_cache = _resolve("inference_engine_explicit_kv_cache")
v2_constant_feature_mask = _resolve("v2_constant_feature_mask")
v2_remove_constant_features = _resolve("v2_remove_constant_features")
v2_fit_feature_group_scaling = _resolve("v2_fit_feature_group_scaling")
v2p5_remove_constant_features = _resolve("v2p5_remove_constant_features")
v2p5_pad_and_reshape_feature_groups = _resolve("v2p5_pad_and_reshape_feature_groups")
v2p5_normalize_feature_groups = _resolve("v2p5_normalize_feature_groups")
v2p6_remove_constant_features = _resolve("v2p6_remove_constant_features")
v2p6_pad_and_reshape_feature_groups = _resolve("v2p6_pad_and_reshape_feature_groups")
v2p6_normalize_feature_groups = _resolve("v2p6_normalize_feature_groups")
ecdf_context_key = _resolve("ecdf_context_key")


def missing_names(feature: str | None = None) -> list[MissingTabPFNName]:
    """The names (of ``feature``, or all) that the installed tabpfn lacks."""
    found = [globals()[name] for name in PRIVATE_NAMES]
    return [
        value
        for value in found
        if isinstance(value, MissingTabPFNName) and feature in (None, value.feature)
    ]


def require(feature: str) -> None:
    """Raises the first missing name's error if ``feature`` lacks a tabpfn name.

    Raises:
        TabPFNInternalsError: One line naming the name and the tabpfn version.
    """
    missing = missing_names(feature)
    if missing:
        raise missing[0].error()


def models_may_be_shared() -> bool:
    """Whether tabpfn's built-model cache may hand the same model to several loads.

    True when ``TABPFN_MODEL_CACHE_SIZE`` turns the cache on, and when the
    installed tabpfn lacks the probe (the caller then patches a copy: always
    correct, only slower).
    """
    if isinstance(get_built_model_cache_size, MissingTabPFNName):
        return True
    return get_built_model_cache_size() > 0


def member_model_index(config: Any) -> int:
    """Which of the regressor's models an ensemble member's config runs."""
    return config._model_index


def uses_majority_downsample(regressor: Any) -> bool:
    """Whether a fitted ``TabPFNRegressor`` subsamples per dataset (batching refuses it)."""
    return regressor._uses_majority_downsample()


def handle_constant_target(regressor: Any, n_test: int, output_type: str, quantiles: Any) -> Any:
    """What ``predict`` returns for a constant target (answered without the model)."""
    return regressor._handle_constant_target(n_test, output_type, quantiles)


def translate_batched_logits(regressor: Any, **kwargs: Any) -> Any:
    """One member's logits in the dataset's target space, as ``predict_batched`` does."""
    return regressor._translate_batched_logits(**kwargs)


def decode_batched_dataset(regressor: Any, **kwargs: Any) -> Any:
    """One dataset's averaged logits decoded to ``predict``'s output."""
    return regressor._decode_batched_dataset(**kwargs)
