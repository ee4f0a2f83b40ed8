"""Every private tabpfn name the retrofit uses, pinned against tabpfn 9.2.0: the one pin test.

``retrofit/tabpfn_surface.py`` lists them all (functions and values it
imports, methods and attributes of tabpfn's classes). Each test here fails
when tabpfn changes what the retrofit assumes: a name is gone, a signature or
a body changed (the source digests fail on any edit, so a new tabpfn release
is re-checked by a person before the digests are updated), or
``OTabPFNRegressor.__init__`` drifted from ``TabPFNRegressor.__init__``.
Further tests check what the two overridden methods
(``_initialize_model_variables``, ``_get_tuning_regressor``) read and set, and
that a missing helper breaks only ragged ``predict_batched``.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from tabpfn import ModelSpecs, TabPFNClassifier, TabPFNRegressor

from retrofit import OTabPFNClassifier, OTabPFNRegressor, load_host, tabpfn_surface

ROOT = Path(__file__).resolve().parents[2]

# Qualified name -> (signature without annotations, SHA-256 of the dedented source)
# in tabpfn 9.2.0. Values (not code) are pinned in PINNED_VALUES.
PINNED = {
    "tabpfn.inference._batch_member_inputs": (
        "(xs, ys)",
        "7f5fbd5752e011d10e5dce83682cf1ef0103f0e32b07c3400ee5dcbec03a73bf",
    ),
    "tabpfn.inference._estimator_batch_budget": (
        "(model)",
        "a747971569dfd305c2591cd2e80cbdf42727877b6e5ebbee7e08a662ee732126",
    ),
    "tabpfn.inference._maybe_run_gpu_preprocessing": (
        "(X, gpu_preprocessor, feature_schema, *, num_train_rows=None, use_fitted_cache=False)",
        "ac97e0e00f0773ebdc87be1466a1a4a6025ec7b5e739b7cc4df19d346be6e2e3",
    ),
    "tabpfn.inference._members_per_forward": (
        "(rows_per_member, columns_per_member, budget)",
        "369337c857fe3eb86a5337a9f574eda46a4243a0aa638f2b5a8c40e3ec89fcd5",
    ),
    "tabpfn.inference._prepare_model_inputs": (
        "(device, force_inference_dtype, X_train, X_test, y_train)",
        "eddf4e74c67cc3f6e63b2ebd9d8b26353f7973a6381e20ee6f08f9a90651ead4",
    ),
    "tabpfn.memory.should_save_peak_mem": (
        "(memory_saving_mode, X_train_shape, X_test_shape, devices, dtype_byte_size)",
        "2b690be517ad7ba264cfd7ec48131567d5cf58daa0af30c09b891fc95b25764b",
    ),
    "tabpfn.preprocessing.clean.clean_data_transform": (
        "(X, *, cat_indices, ord_encoder, passthrough_inf=False)",
        "8ec1ffaa45c16557781fa46754b0f5676b324f890eb14d0b7b5c377ba97f7284",
    ),
    "tabpfn.preprocessing.datamodel.FeatureModality": (
        None,
        "90a177efbe855f0a6ee919f6b5f85c866457e74145361d231aad1a52b274347e",
    ),
    "tabpfn.utils.get_autocast_context": (
        "(device, *, enabled)",
        "8ea75da02a6fb1398429bc6a3428621498fabd5f361e52ddfa060100d71e9bce",
    ),
    "tabpfn.validation.check_input_shape_matches": (
        "(X, *, estimator)",
        "bf57db8016c1ec18869244b8847f5250b89e01e9d1f02a1aca4659bdb511b711",
    ),
    "tabpfn.validation.ensure_compatible_predict_input_sklearn": (
        "(X, estimator)",
        "55d4ca75dc3d9e7ece00cc3c9240ac3e1cef8f4b7fceb21723da3b7b9df51d7f",
    ),
    "tabpfn.validation.validate_num_classes": (
        "(num_classes, max_num_classes)",
        "76f854724900e6e6f1dc3aeb4aa1a08726215ed2a48b2d1c9738270250a7dde7",
    ),
    "tabpfn.preprocessing.transform._transform_labels_one": (
        "(config, y_train)",
        "e48934dcb3be18309d96a1292fc3e4699705a466e805df14c3941dc917f587c6",
    ),
    "tabpfn.base.initialize_model_variables_helper": (  # what the override delegates to
        "(calling_instance, model_type)",
        "b09a14a42950a5bd8194f3d824abf02801eb289991cd33a22ed77311087972c5",
    ),
    "tabpfn.model_loading._get_built_model_cache_size": (
        "()",
        "ccb06eb0d7063205839dddc17a16a621ae5fc4d9884a567e391f0a9f14987831",
    ),
    "tabpfn.model_loading._resolve_architecture_name": (
        "(config)",
        "fe0a7a14e6e6f5ecb3dabc84b2c38391dd11293a1e02d010733a0ec8c876dfe9",
    ),
    "tabpfn.regressor.TabPFNRegressor._initialize_model_variables": (
        "(self)",
        "1da50ca2c640aebd8e66226809c2b42431c5b08f0360713324bcf3844d88cc7d",
    ),
    "tabpfn.regressor.TabPFNRegressor._get_tuning_regressor": (
        "(self, **overwrite_kwargs)",
        "e12d70ca576fb85370d6ce1d9dfac510785ef6b5200772d0b8b59f6dae99b725",
    ),
    "tabpfn.regressor.TabPFNRegressor._uses_majority_downsample": (
        "(self)",
        "993de906b11c4b07cf7f67415fdb1917c7824ce0a946acd25dc749fc22aa1d39",
    ),
    "tabpfn.regressor.TabPFNRegressor._handle_constant_target": (
        "(self, n_samples, output_type, quantiles)",
        "5c19959b6cf5e8d276265d771d9338a4c49191e277f03fc18c4402eb89640556",
    ),
    "tabpfn.regressor.TabPFNRegressor._translate_batched_logits": (
        "(self, *, output, config, znorm_borders, std_borders)",
        "ce5de919c530933ec0477990cd1398a51fbfa5eefc1b73410d4127d3c450ef47",
    ),
    "tabpfn.regressor.TabPFNRegressor._decode_batched_dataset": (
        "(self, *, accumulated_logits, n_estimators, raw_space_bardist, znorm_space_bardist,"
        " y_mean, y_std, output_type, quantiles)",
        "0ed5ee3b542bee0e0815f138b6840b2d9b3c59da2c18c4f2b8b03d8fa5d20d11",
    ),
    "tabpfn.classifier.TabPFNClassifier._initialize_model_variables": (
        "(self)",
        "1da50ca2c640aebd8e66226809c2b42431c5b08f0360713324bcf3844d88cc7d",
    ),
    "tabpfn.classifier.TabPFNClassifier._get_tuning_classifier": (
        "(self, **overwrite_kwargs)",
        "42633220b593764dc8ba4d07b2ea57338592a515beeda7bf216e10bf840eca32",
    ),
    "tabpfn.classifier.TabPFNClassifier._uses_majority_downsample": (
        "(self)",
        "993de906b11c4b07cf7f67415fdb1917c7824ce0a946acd25dc749fc22aa1d39",
    ),
    "tabpfn.classifier.TabPFNClassifier.forward": (
        "(self, X, *, use_inference_mode=False, return_logits=False, return_raw_logits=False)",
        "ac5c72c63e8217b7c948dcd8161f55d4e962460879b7c4b0cb07b2b831d0939e",
    ),
    "tabpfn.architectures.tabpfn_v2.TabPFNV2._pad_and_group_features": (
        "(self, x_RBC)",
        "cddd781f2288e0d1bae732377ce242c265f9af471632bf53e72a27eeef757021",
    ),
    "tabpfn.architectures.tabpfn_v2.TabPFNV2._embed_targets": (
        "(self, y, *, num_rows, num_train_labels, batch_size)",
        "243af3c72437f61276b826a42a5c6d6e016288545583b4e813b14bde6f4b3cea",
    ),
    "tabpfn.architectures.tabpfn_v2.TabPFNV2._embed_features": (
        "(self, x_RSF, *, num_train_labels, num_feature_groups, batch_size, feature_cache=None)",
        "f98d55566a1acd56ec19305dcd477a5609025328fa1bdf8b5a1a73d34a6bee07",
    ),
    "tabpfn.architectures.tabpfn_v2.TabPFNV2._decode": (
        "(self, x_BRCD, start, *, only_return_standard_out)",
        "2c0e8b827cecda8b4fbd1b00ddf032337db9e3156e92c2d42a5838d8988e9c81",
    ),
    "tabpfn.architectures.tabpfn_v2_5.TabPFNV2p5._preprocess_and_embed_features": (
        "(self, x_RiBC, num_train_labels, batch_size, *, scaler_cache=None, feature_state=None,"
        " return_state=False)",
        "de075e5407ad0930d71660a110bb58ef27f97fb3dce0b592c0ba246993114cf3",
    ),
    "tabpfn.architectures.tabpfn_v2_5.TabPFNV2p5._preprocess_and_embed_targets": (
        "(self, y, num_train_rows, num_train_labels, batch_size)",
        "427a31d36674c3c72136355917168c3d6a2b26cfd1ad31cd2f3a94ece908f1a1",
    ),
    "tabpfn.architectures.tabpfn_v2_5.TabPFNV2p5._decode": (
        "(self, x_BRCD, *, test_start, train_start, train_end, only_return_standard_out)",
        "3c8e3129d8d449ff7f124e6876982c3b139a4f032541831aa392c92265cc11da",
    ),
    "tabpfn.architectures.tabpfn_v2_6.TabPFNV2p6._preprocess_and_embed_features": (
        "(self, x_RiBC, num_train_labels, batch_size, *, scaler_cache=None, feature_state=None,"
        " return_state=False)",
        "f991f324ed17cd0e726d2b426792f8a6ee5a6ab832b53cd40ca3031de15aa011",
    ),
    "tabpfn.architectures.tabpfn_v2_6.TabPFNV2p6._preprocess_and_embed_targets": (
        "(self, y, num_train_rows, num_train_labels, batch_size)",
        "427a31d36674c3c72136355917168c3d6a2b26cfd1ad31cd2f3a94ece908f1a1",
    ),
    "tabpfn.architectures.tabpfn_v2_6.TabPFNV2p6._decode": (
        "(self, x_BRCD, *, test_start, train_start, train_end, only_return_standard_out)",
        "3c8e3129d8d449ff7f124e6876982c3b139a4f032541831aa392c92265cc11da",
    ),
    "tabpfn.architectures.tabpfn_v3.TabPFNV3._stages_0_to_2": (
        "(self, x_RiBC, y, *, performance_options, return_inducing_hidden, kv_cache,"
        " x_is_test_only)",
        "47543982f35dd180b8500ae7f9bf42630f13b6e916f0c205f70aaf04ea785d40",
    ),
    "tabpfn.architectures.tabpfn_v3.TabPFNV3._prepare_y": (
        "(self, y, num_train, batch_size)",
        "69156dd170f8febf02fafa3425eb1935671e6479ea9a0adaea2d5a907953a01c",
    ),
    "tabpfn.architectures.tabpfn_v3.TabPFNV3._embed_icl_y": (
        "(self, y_BN)",
        "90dddfba7490d001d434ff147e39f694f8ae9f638780312efc799b82da40a5bd",
    ),
    "tabpfn.architectures.tabpfn_v3_5.TabPFNV3p5._stages_0_to_2": (
        "(self, x_RiBC, y, task_type, *, performance_options, return_inducing_hidden, kv_cache,"
        " x_is_test_only)",
        "4c45e933537f18fd5222346ca364b0ad6d4cb68eb2153d74a9c955e6f1bcd0e7",
    ),
    "tabpfn.architectures.tabpfn_v3_5.TabPFNV3p5._prepare_y": (
        "(self, y, num_train, batch_size, *, task_type)",
        "4eec5c7a3717bd2a2dc610554ec836c040f912c6accfe387c26485eefbe7f027",
    ),
    "tabpfn.architectures.tabpfn_v3_5.TabPFNV3p5._embed_icl_y": (
        "(self, y_BN, *, task_type)",
        "442d429c0946994319f1eb378d322b5d92f7e55fd743ad857fb4e174cb7a2ab6",
    ),
    # Row weights (retrofit/weighted_preprocessing/).
    "tabpfn.preprocessing.steps.utils._NoInverseImputer": (
        "(*, missing_values=nan, strategy='mean', fill_value=None, copy=True, add_indicator=False,"
        " keep_empty_features=False)",
        "7c99694f20328e1fb966422ba17bd16fc1ba1e3d26357248d09e6fd0bd9c1985",
    ),
    "tabpfn.preprocessing.ensemble._resolve_importance_top_k": (
        "(importance_top_k_count, n_total_features, auto_top_k=150, auto_min_features=200)",
        "44bcadfa8fd7390c38a6e0ab7fec6519c90552a8d30c5cd03f8ca158a36aa5db",
    ),
    "tabpfn.preprocessing.steps.reshape_feature_distribution_step."
    "ReshapeFeatureDistributionsStep._create_transformers_and_new_schema": (
        "(self, n_samples, n_features, feature_schema)",
        "e0323c2e2748876ab4cfbfb42c26aefad284df740e3587bb17b2c96fe5dc2dda",
    ),
    "tabpfn.preprocessing.steps.encode_categorical_features_step."
    "EncodeCategoricalFeaturesStep._get_transformer": (
        "(self, X, categorical_features)",
        "201e46a9a046c6e8709fafca1e2531940eed3564203c6d3efd99da36755bd81e",
    ),
    "tabpfn.preprocessing.steps.encode_categorical_features_step."
    "EncodeCategoricalFeaturesStep._fit_transform_internal": (
        "(self, X, feature_schema)",
        "ee3fc8840521eb21f529b438912f49ee060c10ef1e442b9e198cbfd85ecb53bd",
    ),
    "tabpfn.preprocessing.steps.add_svd_features_step.AddSVDFeaturesStep._fit": (
        "(self, X, feature_schema)",
        "39454d60d042921c70dce14e8f465e4d7d0bf5d9d157ea2392e79268a0553505",
    ),
    "tabpfn.preprocessing.steps.add_fingerprint_features_step.AddFingerprintFeaturesStep._fit": (
        "(self, X, feature_schema)",
        "b5d94d16ff9df7b92e3f91aaa05e7a0acaf51a291500ca51a47127dc0ba3add6",
    ),
    "tabpfn.preprocessing.steps.safe_power_transformer.SafePowerTransformer."
    "_yeo_johnson_optimize": (
        "(self, x)",
        "9ee626e69a12f4b0d72968193d0fff8498a2d376cdc62579916c8ba5ea7b6942",
    ),
    "tabpfn.preprocessing.steps.squashing_scaler_transformer.SquashingScaler.fit": (
        "(self, X, y=None)",
        "3b855411e06a187517c479858e3b8b47e5235c4ae1d41b323be03fdfd257a0b2",
    ),
    "tabpfn.preprocessing.steps.adaptive_quantile_transformer.AdaptiveQuantileTransformer.fit": (
        "(self, X, y=None)",
        "53778c34e11599f7b457987ead8d4167012031a1f27f9de7ace12f03e6bc3200",
    ),
    "tabpfn.preprocessing.steps.kdi_transformer.KDITransformerWithNaN.fit": (
        "(self, X, y=None)",
        "838ceeb25017fc3d23ba665e4141c6b269a84edca4676813a0a8d5e029ff4b77",
    ),
    "tabpfn.preprocessing.torch.steps.TorchSoftClipOutliersStep._fit": (
        "(self, x)",
        "f6a196bb7b3fda335951fc4f0dcc4cf3fcff730a29927405a2f2772efb8aed14",
    ),
    "tabpfn.preprocessing.torch.torch_soft_clip_outliers.TorchSoftClipOutliers.fit": (
        "(self, x)",
        "106244856c23a6be859e051f7c62e5634a4439fa72a28c4c1c81b17bc4fa8d3c",
    ),
    "tabpfn.preprocessing.ensemble.TabPFNEnsemblePreprocessor.__init__": (
        "(self, *, configs, n_samples, feature_schema, random_state, n_preprocessing_jobs,"
        " keep_fitted_cache=False, enable_gpu_preprocessing=False,"
        " feature_subsampling_method=<FeatureSubsamplingMethod.RANDOM: 'random'>,"
        " constant_feature_count=50, subsample_samples=None,"
        " sample_subsampling_method=<SampleSubsamplingMethod.AUTO: 'auto'>,"
        " importance_top_k_count='auto', X_train=None, y_train=None, task_type='classifier')",
        "ca06674eb0694db1777dcf2ff719cf0390014ef712747124aed259310ef20bbc",
    ),
    "tabpfn.preprocessing.ensemble.TabPFNEnsemblePreprocessor."
    "fit_transform_ensemble_members_iterator": (
        "(self, X_train, y_train, parallel_mode)",
        "121cd9b6c9d1d7188f77806054deb2d3e9cb256f8afec2d5c7439c2d80814d81",
    ),
    # Row weights: the v2 family's encoder steps, v2's NaN-target embedding, and the
    # preprocessing v3 and v3.5 are handed weighted statistics in (retrofit/hosts/).
    "tabpfn.architectures.tabpfn_v2._constant_feature_mask": (
        "(x_RSF)",
        "fcab956443fc9246bfc50db0ab147b59d8d0266d6028cb08ccf1a931b46908b9",
    ),
    "tabpfn.architectures.tabpfn_v2._remove_constant_features": (
        "(x_RSF, non_constant_mask)",
        "9c4fe83de95687da1622562387857037d4013ef7158f8309c576292856ef5e84",
    ),
    "tabpfn.architectures.tabpfn_v2._fit_feature_group_scaling": (
        "(x_RSF)",
        "a8000a39eedad3d3aa5621ca22411d129bd19ce8ebbff57185e0b9101a914889",
    ),
    "tabpfn.architectures.tabpfn_v2_5._remove_constant_features": (
        "(x_RiBC, *, column_mask=None)",
        "2956e79db4f3c9e71be269313d2ed9f65fb6f9a96822ce429cf0df10f9289f84",
    ),
    "tabpfn.architectures.tabpfn_v2_5._pad_and_reshape_feature_groups": (
        "(x_RiBC, num_features_per_group)",
        "4a5c87c23532d2869aed74955d9c0e11712cd31d517c546fec317e14f081a9b7",
    ),
    "tabpfn.architectures.tabpfn_v2_5._normalize_feature_groups": (
        "(x_RiBF, num_features_per_group, *, params=None)",
        "74b63518856e5c3d20cae2f50cd56a3c8834edcd117510263e1cae038c365592",
    ),
    "tabpfn.architectures.tabpfn_v2_6._remove_constant_features": (
        "(x_RiBC, *, column_mask=None)",
        "2956e79db4f3c9e71be269313d2ed9f65fb6f9a96822ce429cf0df10f9289f84",
    ),
    "tabpfn.architectures.tabpfn_v2_6._pad_and_reshape_feature_groups": (
        "(x_RiBC, num_features_per_group)",
        "4a5c87c23532d2869aed74955d9c0e11712cd31d517c546fec317e14f081a9b7",
    ),
    "tabpfn.architectures.tabpfn_v2_6._normalize_feature_groups": (
        "(x_RiBF, num_features_per_group, *, params=None)",
        "74b63518856e5c3d20cae2f50cd56a3c8834edcd117510263e1cae038c365592",
    ),
    "tabpfn.architectures.tabpfn_v2.TabPFNV2._embed_nan_target": (
        "(self, feature_means_B1, unique_ys, batch_size)",
        "0de44ac94cccc0c161350277e61ac817cf7189b70b162b37b050715befd0637d",
    ),
    "tabpfn.architectures.tabpfn_v3.TabPFNV3._preprocess_raw": (
        "(self, x_RiBC, num_train, scaler_cache=None)",
        "9496e19ca313a6b0341b4dd04f96b8413b7cd041e7d00b7cc4eaffa2764b0b37",
    ),
    "tabpfn.architectures.tabpfn_v3_5.TabPFNV3p5._preprocess_raw": (
        "(self, x_RiBC, num_train, scaler_cache=None)",
        "a9f8394e451e0244a3dc306653cfced5ad78d51140135da950d9ef6a46eae4be",
    ),
    "tabpfn.classifier.TabPFNClassifier._compute_downsample_correction": (
        "(self, *, y_encoded)",
        "effc10af1c25847a5ed9770d573c58b8cf9cf021b6334c9bb08d3c5f15ea10c2",
    ),
    "tabpfn.classifier.TabPFNClassifier._initialize_dataset_preprocessing": (
        "(self, X, y, random_state)",
        "b1d5448a9c6a7f38bd66451035fa551625a3b9fd79ca095421f49623259981f5",
    ),
    "tabpfn.classifier.TabPFNClassifier.fit": (
        "(self, X, y)",
        "e73362fa75838a109e189246e089833c1900e5b82f6c2a066a43bac858c6814c",
    ),
    "tabpfn.inference.InferenceEngineCachePreprocessing": (
        None,
        "daf65778ef4617dc4d06470c71dbf12cf7c6b37b3fedb6a2354e6f422e0acad4",
    ),
    "tabpfn.inference.InferenceEngineCachePreprocessing._call_model": (
        (
            "(self, *, device, members, X_tests, autocast, only_return_standard_out, "
            "save_peak_mem, task_type)"
        ),
        "b99fab6aca70cae6622d8ddaf8bb6a773b5ed6209446559776645b5bf14a62b0",
    ),
    "tabpfn.inference.InferenceEngineExplicitKVCache": (
        None,
        "e3f7ba4dafeaccc5102692be4778a5cb9dd844f25145d11fd422be85449cbd63",
    ),
    "tabpfn.inference.InferenceEngineExplicitKVCache._build_cache": (
        "(self, *, device, members, autocast, save_peak_mem, stage_cache_on_cpu)",
        "288cd059d4d266c26e0f1778118f2f02a0da6aa1ec307b84209575c8576f13a3",
    ),
    "tabpfn.inference.InferenceEngineOnDemand": (
        None,
        "371af23c701f03b5fb4e6fdd11d1f80dd136aebcc4e7b62b462173d0013c962d",
    ),
    "tabpfn.inference.InferenceEngineOnDemand._call_model": (
        (
            "(self, *, device, members, X_tests, autocast, only_return_standard_out, "
            "save_peak_mem, task_type)"
        ),
        "6d4f58abb7f966adeedf167127559f25013ff36879127605ea86158141829e45",
    ),
    "tabpfn.regressor.TabPFNRegressor._build_ensemble_preprocessor_and_executor": (
        (
            "(self, *, X, y, ensemble_configs, static_seed, byte_size, "
            "n_preprocessing_jobs, inference_mode)"
        ),
        "95065308e6bbaab0ec3e026a08263693c4ea9aef97cbddf69301054a89de8860",
    ),
    "tabpfn.regressor.TabPFNRegressor._compute_downsample_correction": (
        "(self, *, y_raw)",
        "d990d89daa45f28b49ba70f06477982a38727de28b19d327634b4c667f349a92",
    ),
    "tabpfn.regressor.TabPFNRegressor._initialize_dataset_preprocessing": (
        "(self, X, y, random_state)",
        "76cc34e483c91a5316daa74b027cb227730cd9fb9cfa6fb207557b41e6460b5e",
    ),
    "tabpfn.regressor.TabPFNRegressor._rebuild_raw_space_bardist": (
        "(self)",
        "e0c3909445bf46d40f0a429d70c3721764ec017641ff73f95f0e3cba0e368e51",
    ),
    "tabpfn.regressor.TabPFNRegressor.fit": (
        "(self, X, y)",
        "28b7b5b9caa9c37284e7c62bd8ea5ea94a2628e9423f58c6042e9f8021ad5786",
    ),
}

PINNED_VALUES = {
    "tabpfn.regressor._USABLE_OUTPUT_TYPES": (
        "mean",
        "median",
        "mode",
        "quantiles",
        "full",
        "main",
    ),
    "tabpfn.constants.DEFAULT_SAVE_PEAK_MEMORY_FACTOR": 8,
    "tabpfn.architectures.tabpfn_v3_5._ECDF_CONTEXT_KEY": "ecdf_buckets",
}
#: Per estimator: (tabpfn's class, the private methods overridden: the loader, the
#: tuning builder, then the weighted fit's hooks). A drop-in keeps every default of
#: tabpfn's, ``model_path="auto"`` included.
ESTIMATORS = {
    OTabPFNRegressor: (
        TabPFNRegressor,
        (
            "_initialize_model_variables",
            "_get_tuning_regressor",
            "_initialize_dataset_preprocessing",
            "_build_ensemble_preprocessor_and_executor",
            "_compute_downsample_correction",
        ),
    ),
    OTabPFNClassifier: (
        TabPFNClassifier,
        (
            "_initialize_model_variables",
            "_get_tuning_classifier",
            "_initialize_dataset_preprocessing",
            "_compute_downsample_correction",
        ),
    ),
}
RETROFIT_PARAMETERS = ("mode", "tau", "support", "eps_den")
#: Parameters after tabpfn's: scikit-learn's ``class_weight`` for the classifier.
TRAILING_PARAMETERS = {OTabPFNRegressor: (), OTabPFNClassifier: ("class_weight",)}


def _lookup(qualified: str):
    """The object a dotted name names: a module attribute or a class's method."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise LookupError(qualified)


@pytest.fixture(scope="module")
def checkpoint(tiny_v3_path):
    return tiny_v3_path


def _signature(function) -> str:
    sig = inspect.signature(function)
    bare = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    return str(sig.replace(parameters=bare, return_annotation=inspect.Signature.empty))


def _source_digest(obj) -> str:
    return hashlib.sha256(textwrap.dedent(inspect.getsource(obj)).encode()).hexdigest()


def _surface_names() -> set[str]:
    names = {f"{module}.{attr}" for module, attr, _ in tabpfn_surface.PRIVATE_NAMES.values()}
    for owner, methods in tabpfn_surface.PRIVATE_METHODS.items():
        names |= {f"{owner}.{m}" for m in methods}
    return names


def test_every_name_of_the_surface_is_pinned_and_every_pin_is_on_the_surface():
    extra = {"tabpfn.base.initialize_model_variables_helper"}
    assert _surface_names() == (set(PINNED) | set(PINNED_VALUES)) - extra
    assert not tabpfn_surface.missing_names()


@pytest.mark.parametrize("qualified", sorted(PINNED))
def test_the_private_code_the_retrofit_relies_on_is_tabpfn_9_2_0s(qualified):
    obj = _lookup(qualified)
    signature, digest = PINNED[qualified]
    if signature is not None:
        assert _signature(obj) == signature, f"tabpfn changed the signature of {qualified}"
    assert _source_digest(obj) == digest, (
        f"tabpfn changed {qualified}: re-check its use (retrofit/tabpfn_surface.py lists "
        "the callers) against it, then update PINNED"
    )


@pytest.mark.parametrize("qualified", sorted(PINNED_VALUES))
def test_the_private_values_the_retrofit_relies_on_are_tabpfn_9_2_0s(qualified):
    assert _lookup(qualified) == PINNED_VALUES[qualified]


@pytest.mark.parametrize(
    ("owner", "attribute"),
    [(o, a) for o, attrs in tabpfn_surface.PRIVATE_ATTRIBUTES.items() for a in attrs],
)
def test_the_private_attributes_the_retrofit_reads_are_still_set(owner, attribute):
    assert attribute in inspect.getsource(_lookup(owner))


@pytest.mark.parametrize("ours_class", list(ESTIMATORS), ids=lambda c: c.__name__)
def test_each_estimator_takes_every_tabpfn_parameter_with_its_default_in_order(ours_class):
    theirs_class, _ = ESTIMATORS[ours_class]
    ours = list(inspect.signature(ours_class.__init__).parameters.values())[1:]
    theirs = list(inspect.signature(theirs_class.__init__).parameters.values())[1:]
    assert tuple(p.name for p in ours[: len(RETROFIT_PARAMETERS)]) == RETROFIT_PARAMETERS
    trailing = TRAILING_PARAMETERS[ours_class]
    rest = ours[len(RETROFIT_PARAMETERS) : len(ours) - len(trailing)]
    assert tuple(p.name for p in ours[len(ours) - len(trailing) :]) == trailing
    assert all(p.default is None for p in ours[len(ours) - len(trailing) :])
    assert [p.name for p in rest] == [p.name for p in theirs]
    differs = {
        p.name: (p.default, q.default)
        for p, q in zip(rest, theirs, strict=True)
        if p.default != q.default
    }
    assert differs == {}
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in ours)


@pytest.mark.parametrize("ours_class", list(ESTIMATORS), ids=lambda c: c.__name__)
def test_the_overridden_methods_have_the_signatures_the_overrides_assume(ours_class):
    theirs_class, overridden = ESTIMATORS[ours_class]
    init = inspect.signature(theirs_class._initialize_model_variables)
    assert list(init.parameters) == ["self"]
    assert init.return_annotation in (int, "int")
    tuning = inspect.signature(getattr(theirs_class, overridden[1]))
    assert [(p.name, p.kind) for p in tuning.parameters.values()] == [
        ("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        ("overwrite_kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
    # The estimator's own methods and those of the shared mixin it inherits.
    own = {
        name
        for klass in ours_class.__mro__[: ours_class.__mro__.index(theirs_class)]
        for name, value in vars(klass).items()
        if callable(value)
    }
    private_overrides = {
        n for n in own if n.startswith("_") and not n.startswith("__") and hasattr(theirs_class, n)
    }
    assert private_overrides == set(overridden)


@pytest.mark.parametrize("ours_class", list(ESTIMATORS), ids=lambda c: c.__name__)
def test_the_fit_state_methods_keep_tabpfns_signatures(ours_class):
    theirs_class, _ = ESTIMATORS[ours_class]
    for name in ("save_fit_state", "load_from_fit_state"):
        ours, theirs = getattr(ours_class, name), getattr(theirs_class, name)
        assert ours.__qualname__.startswith("RetrofitEstimatorMixin.")
        assert _signature(ours) == _signature(theirs), name


_WITHOUT_A_HELPER = """
import sys
import types
import numpy as np
import tabpfn.inference
# The surface sees a tabpfn.inference without the helper (a release that renamed
# it); tabpfn's own code keeps its module, so tabpfn itself still works.
real = sys.modules["tabpfn.inference"]
fake = types.ModuleType(real.__name__)
fake.__dict__.update({k: v for k, v in vars(real).items() if k != "_batch_member_inputs"})
sys.modules["tabpfn.inference"] = fake
from retrofit import OTabPFNRegressor
from retrofit.errors import TabPFNInternalsError
sys.modules["tabpfn.inference"] = real
rng = np.random.default_rng(0)
X, X_test = rng.normal(size=(30, 3)), rng.normal(size=(5, 3))
y = X @ rng.normal(size=3)
est = OTabPFNRegressor(model_path="embedded", n_estimators=1, device="cpu", mode="full-o")
est.fit(X, y)
print("PREDICT", est.predict(X_test).shape)
try:
    est.predict_batched([X, X[:20]], [y, y[:20]], [X_test, X_test[:3]])
except TabPFNInternalsError as err:
    print("ERROR", str(err))
"""


def test_a_missing_batching_helper_breaks_only_ragged_predict_batched_with_one_line():
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_A_HELPER],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert "PREDICT (5,)" in out
    errors = [line for line in out if line.startswith("ERROR ")]
    assert errors == [
        f"ERROR ragged predict_batched needs tabpfn.inference._batch_member_inputs, which "
        f"tabpfn {tabpfn_surface.TABPFN_VERSION} lacks (tabpfn-retrofit supports tabpfn 9.2.x)"
    ]


def _data(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d)


def _kwargs(path) -> dict:
    return {
        "model_path": str(path),
        "n_estimators": 1,
        "device": "cpu",
        "inference_precision": torch.float32,
    }


class _Spy(TabPFNRegressor):
    calls: list[str]

    def _initialize_model_variables(self) -> int:
        type(self).calls.append(repr(self.model_path)[:40])
        return super()._initialize_model_variables()


@pytest.mark.parametrize("entry", ["fit", "get_inference_config", "fit_with_differentiable_input"])
def test_every_model_load_goes_through_initialize_model_variables(checkpoint, entry):
    _Spy.calls = []
    est = _Spy(**_kwargs(checkpoint))
    X, y = _data()
    if entry == "fit":
        est.fit(X, y)
    elif entry == "get_inference_config":
        est.get_inference_config()
    else:
        est.set_params(differentiable_input=True, ignore_pretraining_limits=True)
        est.fit_with_differentiable_input(torch.tensor(X).float(), torch.tensor(y).float())
    assert len(_Spy.calls) == 1


def test_initialize_model_variables_reads_model_path_then_and_sets_models(checkpoint):
    # The override hands tabpfn a translated model_path for the call only, and
    # patches self.models_ after it: tabpfn must read the attribute during the
    # call and run exactly the models it leaves in models_.
    specs = load_host(checkpoint)
    est = TabPFNRegressor(**{**_kwargs(checkpoint), "model_path": "unused"})
    est.model_path = specs
    est._initialize_model_variables()
    assert est.models_[0] is specs.model
    X, y = _data()
    est = TabPFNRegressor(**_kwargs(checkpoint)).fit(X, y)
    reference = est.predict(X)
    with torch.no_grad():
        for p in est.models_[0].parameters():
            p.mul_(1.5)  # the executor holds these very models
    assert not np.array_equal(est.predict(X), reference)


def test_get_tuning_regressor_is_built_from_get_params_and_is_what_fit_tunes_with(checkpoint):
    X, y = _data(n=80)
    est = TabPFNRegressor(
        **_kwargs(checkpoint),
        tuning_config={
            "calibrate_temperature": True,
            "tuning_holdout_frac": 0.5,
            "tuning_n_folds": 1,
        },
    )
    built: list[TabPFNRegressor] = []
    original = TabPFNRegressor._get_tuning_regressor

    def spy(self, **kwargs):
        built.append(original(self, **kwargs))
        return built[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TabPFNRegressor, "_get_tuning_regressor", spy)
        with pytest.warns(UserWarning):
            est.fit(X, y)
    assert built and all(type(b) is TabPFNRegressor for b in built)
    params = built[0].get_params()
    assert params["model_path"] == est.model_path and params["tuning_config"] is None
    assert params["fit_mode"] == "fit_preprocessors"


def test_the_tuning_regressor_of_otabpfnregressor_keeps_the_retrofit_settings(checkpoint):
    est = OTabPFNRegressor(mode="oattention", tau=0.5, **_kwargs(checkpoint))
    est.categorical_features_indices_ = None  # set by fit before tuning
    tuning = est._get_tuning_regressor()
    view = TabPFNRegressor(
        **{k: v for k, v in est.get_params().items() if hasattr(TabPFNRegressor(), k)}
    )
    view.categorical_features_indices_ = None
    plain = view._get_tuning_regressor()
    assert type(tuning) is OTabPFNRegressor
    assert tuning.mode == "oattention" and tuning.tau == 0.5
    expected = plain.get_params()
    assert {k: v for k, v in tuning.get_params().items() if k in expected} == expected


def test_modelspecs_models_are_used_by_reference(checkpoint):
    # Why the override patches a copy of a ModelSpecs model: tabpfn runs the caller's.
    specs = load_host(checkpoint)
    est = TabPFNRegressor(**{**_kwargs(checkpoint), "model_path": specs}).fit(*_data())
    assert est.models_[0] is specs.model
    assert isinstance(specs, ModelSpecs)
