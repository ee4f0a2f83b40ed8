"""The OpenML suite's data: the OpenML datasets, through the ``openml`` client and its cache.

Without a reachable server and without a populated cache this fails fast with
one :class:`DatasetUnavailableError`. Feature names are matched to the suite's
by normalized name (case and punctuation ignored), falling back to position
with a warning.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openml
import pandas as pd
import requests

from eval.errors import DatasetIntegrityError, DatasetUnavailableError, DatasetWarning
from eval.paper.datasets.canonical import Dataset, canonical_sha256, freeze, to_canonical
from eval.paper.datasets.specs import SPECS, DatasetSpec
from eval.paper.datasets.suites import suite_entry, verify_against_suite

__all__ = ["load_openml"]

_OPENML_TIMEOUT_S = 10.0


def _normalized(label: str) -> str:
    return re.sub(r"[^0-9a-z]", "", label.lower())


@contextlib.contextmanager
def _openml_fast_fail(timeout_s: float) -> Iterator[None]:
    """Make the openml client fail fast: one try, a socket timeout per request.

    openml retries connection errors with sleeps and sets no request timeout;
    both are bounded here for the duration of the call and restored after.
    """
    old_policy = openml.config.retry_policy
    old_retries = openml.config.connection_n_retries
    original_request = requests.Session.request

    @functools.wraps(original_request)
    def request_with_timeout(self: Any, method: str, url: str, **kwargs: Any) -> Any:
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = timeout_s
        return original_request(self, method, url, **kwargs)

    openml.config.set_retry_policy("human", 1)
    requests.Session.request = request_with_timeout  # type: ignore[method-assign]
    try:
        yield
    finally:
        requests.Session.request = original_request  # type: ignore[method-assign]
        openml.config.set_retry_policy(old_policy, old_retries)


def _unavailable(name: str, spec: DatasetSpec, cause: BaseException) -> DatasetUnavailableError:
    cache_dir = openml.config.get_config_as_dict()["cachedir"]
    if isinstance(cause, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
        problem = (
            f"the OpenML server ({openml.config.server}) could not be reached and the "
            f"dataset is not in openml's cache ({cache_dir})"
        )
    else:
        problem = (
            f"the OpenML server ({openml.config.server}) or openml's cache "
            f"({cache_dir}) did not provide it"
        )
    return DatasetUnavailableError(
        f"{name}: could not get OpenML dataset {spec.openml_id} ({spec.openml_name}): "
        f"{problem}. To proceed offline use the offline suite (`--suite offline18`, "
        "or load_dataset(name, source='offline')), or pre-populate openml's cache on "
        f"a machine with internet (openml.datasets.get_dataset({spec.openml_id}, "
        "download_data=True)) and copy that cache directory here (see "
        "openml.config.set_root_cache_directory). "
        f"Cause: {type(cause).__name__}: {cause}"
    )


def _openml_frame(
    name: str, spec: DatasetSpec, features: pd.DataFrame, names: list[str]
) -> pd.DataFrame:
    """OpenML features in the suite's column order.

    Columns are matched by normalized name (case and punctuation ignored) when
    all names match, else by position (with a warning).
    """
    if len(names) != len(spec.feature_names):
        raise DatasetIntegrityError(
            f"{name}: OpenML dataset {spec.openml_id} has {len(names)} features "
            f"{names}, suite openml18 expects {len(spec.feature_names)}"
        )
    features = features.set_axis(names, axis=1)
    by_key = {_normalized(n): n for n in names}
    wanted = [_normalized(n) for n in spec.feature_names]
    if set(wanted) == set(by_key) and len(by_key) == len(names):
        return features[[by_key[k] for k in wanted]].copy()
    warnings.warn(
        f"{name}: OpenML feature names {names} differ from the suite's "
        f"{list(spec.feature_names)}; matching columns by position",
        DatasetWarning,
        stacklevel=3,
    )
    return features.copy()


def load_openml(name: str, suites_dir: str | None) -> Dataset:
    """The OpenML version of a dataset, canonical and verified against ``openml18``."""
    spec = SPECS[name]
    suites_path = Path(suites_dir) if suites_dir is not None else None
    entry = suite_entry("openml18", name, suites_path)
    network_errors: tuple[type[BaseException], ...] = (
        requests.exceptions.RequestException,
        openml.exceptions.OpenMLServerError,
        openml.exceptions.OpenMLHashException,
    )
    try:
        with _openml_fast_fail(_OPENML_TIMEOUT_S):
            oml = openml.datasets.get_dataset(
                spec.openml_id,
                download_data=True,
                download_qualities=False,
                download_features_meta_data=False,
            )
            target = oml.default_target_attribute or spec.target
            features, target_values, _, names = oml.get_data(target=target)
    except network_errors as exc:
        raise _unavailable(name, spec, exc) from exc

    if _normalized(target) != _normalized(spec.target):
        warnings.warn(
            f"{name}: OpenML target {target!r} differs from suite target {spec.target!r}",
            DatasetWarning,
            stacklevel=2,
        )
    frame = _openml_frame(name, spec, pd.DataFrame(features), [str(n) for n in names])
    frame[target] = np.asarray(target_values)
    X, y, categorical, categories = to_canonical(frame, spec, target, f"OpenML {spec.openml_id}")
    digest = canonical_sha256(X, y)
    verify_against_suite(
        name, X, y, digest, entry, "openml18", check_hash=bool(entry.get("sha256"))
    )
    return Dataset(
        name=name,
        openml_id=spec.openml_id,
        X=freeze(X),
        y=freeze(y),
        feature_names=[str(n) for n in frame.columns[:-1]],
        target=str(target),
        categorical_features=categorical,
        source=(
            f"openml {openml.__version__}: dataset {spec.openml_id} "
            f"({oml.name} v{oml.version}), cache {openml.config.get_cache_directory()}"
        ),
        sha256=digest,
        categories=categories,
    )
