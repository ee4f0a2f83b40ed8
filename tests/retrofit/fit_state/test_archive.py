"""``save_fit_state`` / ``load_from_fit_state`` of both estimators: same class, settings, bits.

Every round trip runs on the same machine, in float32, and asserts bit equality
(``tobytes``) of every prediction before saving and after loading: the
regressor's every output type (``mean``, ``median``, ``mode``, ``quantiles``,
``full`` with its logits), the classifier's ``predict``, ``predict_proba`` and
``predict_logits``. Hosts: tiny random v3 checkpoints and tiny random v2, v2.5
and v3.5 ``ModelSpecs`` (zero-inits perturbed), and the embedded regressor; each
mode, with ``fit_preprocessors`` and ``fit_with_cache`` (the KV cache with the
train rows' presence is rebuilt on load). A patched round trip still differs
from ``mode="none"``. README's room runs a cross-section of each host x mode x fit
mode matrix, the slow tier the rest (``tests/helpers/tiers.py``).
"""

from __future__ import annotations

import os
import pickle
import signal
import zipfile
from itertools import product
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from tabpfn import TabPFNRegressor

from retrofit import (
    FitStateError,
    OTabPFNClassifier,
    OTabPFNRegressor,
    UnsafeCheckpointError,
    is_patched,
    patch,
    resolve_model,
    save_patched,
)
from retrofit.fit_state.archive import FitRecord, write_fit_state
from retrofit.settings import MODES
from tests.helpers import forks
from tests.helpers.commands import file_mode, listing
from tests.helpers.fit_states import rewrite
from tests.helpers.predictions import flat_prediction
from tests.helpers.tiers import cross_section
from tests.helpers.tiny_hosts import tiny_classifier_specs, tiny_host_specs
from tests.helpers.tiny_models import tiny_v3_checkpoint, tiny_v3_classifier_checkpoint

OUTPUT_TYPES = ("mean", "median", "mode", "quantiles", "full")
FIT_MODES = ("fit_preprocessors", "fit_with_cache")
REGRESSOR_HOSTS = ("v3-file", "tabpfn_v2_5", "tabpfn_v3_5", "embedded")
CLASSIFIER_HOSTS = ("v3-file", "tabpfn_v2", "tabpfn_v3_5")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("fit_state_hosts")
    return {
        "regressor": tiny_v3_checkpoint(folder),
        "classifier": tiny_v3_classifier_checkpoint(folder),
    }


def _model_path(host: str, which: str, checkpoints: dict[str, Path]):
    if host == "v3-file":
        return str(checkpoints[which])
    if host == "embedded":
        return "embedded"
    return tiny_host_specs(host) if which == "regressor" else tiny_classifier_specs(host)


def _kwargs(**extra) -> dict:
    return {"n_estimators": 2, "device": "cpu", "inference_precision": torch.float32, **extra}


def _regression_data(n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, X[:, 0] - 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)


def _classification_data(n: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    return X, (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int) + (X[:, 1] > 1)


def _frame(n: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "x": rng.normal(size=n),
            "colour": pd.Categorical(rng.choice(["red", "green"], size=n)),
            "city": rng.choice(["Oslo", "Lima", None], size=n).astype(object),
        }
    )


def _regressor_outputs(estimator: OTabPFNRegressor, X) -> list[bytes]:
    outputs = []
    for output_type in OUTPUT_TYPES:
        result = estimator.predict(X, output_type=output_type, quantiles=[0.1, 0.5, 0.9])
        outputs += [np.asarray(part).tobytes() for part in flat_prediction(result)]
    return outputs


def _classifier_outputs(estimator: OTabPFNClassifier, X) -> list[bytes]:
    return [
        np.asarray(estimator.predict(X)).tobytes(),
        estimator.predict_proba(X).tobytes(),
        estimator.predict_logits(X).tobytes(),
    ]


def _round_trip(estimator, folder: Path):
    path = folder / "fit.tabpfn_fit"
    estimator.save_fit_state(path)
    return type(estimator).load_from_fit_state(path, device="cpu")


def _assert_same_estimator(loaded, estimator) -> None:
    assert type(loaded) is type(estimator)
    assert loaded.settings_ == estimator.settings_
    assert [r.to_dict() for r in loaded.patch_reports_] == [
        r.to_dict() for r in estimator.patch_reports_
    ]
    expected = {k: v for k, v in estimator.get_params().items() if k != "model_path"}
    assert {k: v for k, v in loaded.get_params().items() if k != "model_path"} == expected
    assert [is_patched(m) for m in loaded.models_] == [is_patched(m) for m in estimator.models_]


# The embedded host is the slowest: fit_with_cache once, patched. README's room runs
# the cross-section named fast (every host, mode and fit mode), the slow tier the rest.
REGRESSOR_CASES = cross_section(
    [
        (host, mode, fit_mode)
        for host in REGRESSOR_HOSTS
        for mode in MODES
        for fit_mode in FIT_MODES
        if host != "embedded" or fit_mode == "fit_preprocessors" or mode == "full-o"
    ],
    fast=[
        ("v3-file", "none", "fit_preprocessors"),
        ("tabpfn_v2_5", "oattention", "fit_with_cache"),
        ("tabpfn_v3_5", "full-o", "fit_preprocessors"),
        ("embedded", "full-o", "fit_with_cache"),
    ],
)
CLASSIFIER_CASES = cross_section(
    product(CLASSIFIER_HOSTS, MODES, FIT_MODES),
    fast=[
        ("v3-file", "full-o", "fit_with_cache"),
        ("tabpfn_v2", "none", "fit_preprocessors"),
        ("tabpfn_v3_5", "oattention", "fit_preprocessors"),
    ],
)


@pytest.mark.parametrize(("host", "mode", "fit_mode"), REGRESSOR_CASES)
def test_a_loaded_regressor_predicts_the_same_bits_in_every_output_type(
    host, mode, fit_mode, checkpoints, tmp_path
):
    X, y = _regression_data()
    model_path = _model_path(host, "regressor", checkpoints)
    estimator = OTabPFNRegressor(**_kwargs(mode=mode, model_path=model_path, fit_mode=fit_mode))
    before = _regressor_outputs(estimator.fit(X, y), X[:7])
    loaded = _round_trip(estimator, tmp_path)
    _assert_same_estimator(loaded, estimator)
    assert loaded.patch_report_ == estimator.patch_report_
    assert _regressor_outputs(loaded, X[:7]) == before
    if mode != "none":  # the loaded model is patched again, not the plain host
        plain = OTabPFNRegressor(
            **_kwargs(mode="none", model_path=_model_path(host, "regressor", checkpoints))
        )
        assert not np.array_equal(plain.fit(X, y).predict(X[:7]), loaded.predict(X[:7]))


@pytest.mark.parametrize(("host", "mode", "fit_mode"), CLASSIFIER_CASES)
def test_a_loaded_classifier_predicts_the_same_bits(host, mode, fit_mode, checkpoints, tmp_path):
    X, y = _classification_data()
    model_path = _model_path(host, "classifier", checkpoints)
    estimator = OTabPFNClassifier(**_kwargs(mode=mode, model_path=model_path, fit_mode=fit_mode))
    before = _classifier_outputs(estimator.fit(X, y), X[:7])
    loaded = _round_trip(estimator, tmp_path)
    _assert_same_estimator(loaded, estimator)
    assert _classifier_outputs(loaded, X[:7]) == before
    if mode != "none":
        plain = OTabPFNClassifier(
            **_kwargs(mode="none", model_path=_model_path(host, "classifier", checkpoints))
        )
        assert not np.array_equal(plain.fit(X, y).predict_proba(X[:7]), loaded.predict_proba(X[:7]))


def test_pandas_input_with_text_labels_round_trips_with_its_classes_and_names(
    checkpoints, tmp_path
):
    X = _frame()
    y = np.where(X["x"] > 0, "high", "low")
    estimator = OTabPFNClassifier(
        **_kwargs(mode="full-o", model_path=str(checkpoints["classifier"]), fit_mode="low_memory")
    ).fit(X, y)
    loaded = _round_trip(estimator, tmp_path)
    assert list(loaded.classes_) == list(estimator.classes_) == ["high", "low"]
    assert list(loaded.feature_names_in_) == ["x", "colour", "city"]
    assert _classifier_outputs(loaded, X.iloc[:7]) == _classifier_outputs(estimator, X.iloc[:7])


def test_an_object_array_with_numpy_strings_round_trips_twice(checkpoints, tmp_path):
    # As in tabpfn's own save/load test: floats and a text column, as objects; here
    # the cells are numpy scalars (np.str_, np.float64), which JSON stores as str, float.
    X, y = _classification_data()
    X = X.astype(object)
    for row, letter in enumerate(np.random.default_rng(1).choice(["A", "B", "C"], size=len(X))):
        X[row, 2] = letter
        X[row, 0] = np.float64(X[row, 0])
    assert type(X[0, 2]) is np.str_ and type(X[0, 0]) is np.float64
    estimator = OTabPFNClassifier(
        **_kwargs(mode="full-o", model_path=str(checkpoints["classifier"]))
    ).fit(X, y)
    once = _round_trip(estimator, tmp_path / "once")
    twice = _round_trip(once, tmp_path / "twice")
    assert _classifier_outputs(twice, X[:7]) == _classifier_outputs(estimator, X[:7])


def test_a_pandas_regression_with_a_series_target_round_trips(checkpoints, tmp_path):
    X = _frame()
    y = pd.Series(X["x"].to_numpy() * 2.0, name="target")
    estimator = OTabPFNRegressor(
        **_kwargs(mode="oattention", model_path=str(checkpoints["regressor"]))
    ).fit(X, y)
    loaded = _round_trip(estimator, tmp_path)
    assert _regressor_outputs(loaded, X.iloc[:7]) == _regressor_outputs(estimator, X.iloc[:7])


def test_several_models_round_trip_with_a_report_each(checkpoints, tmp_path):
    X, y = _regression_data()
    path = str(checkpoints["regressor"])
    estimator = OTabPFNRegressor(**_kwargs(mode="full-o", model_path=[path, path])).fit(X, y)
    loaded = _round_trip(estimator, tmp_path)
    assert len(loaded.patch_reports_) == 2
    _assert_same_estimator(loaded, estimator)
    assert _regressor_outputs(loaded, X[:7]) == _regressor_outputs(estimator, X[:7])


def test_a_resolved_model_and_a_saved_directory_round_trip(checkpoints, tmp_path):
    X, y = _regression_data()
    resolved = resolve_model(str(checkpoints["regressor"]))
    estimator = OTabPFNRegressor(**_kwargs(mode="full-o", model_path=resolved)).fit(X, y)
    loaded = _round_trip(estimator, tmp_path)
    assert loaded.model_path == resolved
    assert _regressor_outputs(loaded, X[:7]) == _regressor_outputs(estimator, X[:7])
    saved_dir = save_patched(checkpoints["regressor"], tmp_path / "saved", mode="oattention")
    estimator = OTabPFNRegressor(**_kwargs(model_path=str(saved_dir.directory))).fit(X, y)
    loaded = _round_trip(estimator, tmp_path)
    assert loaded.settings_["mode"] == "oattention" and loaded.mode is None
    assert _regressor_outputs(loaded, X[:7]) == _regressor_outputs(estimator, X[:7])


def test_a_fit_state_of_a_saved_retrofit_whose_base_changed_is_refused_naming_it(tmp_path):
    """The refit resolves the saved retrofit again: its base is verified before any fit."""
    X, y = _regression_data()
    base = tiny_v3_checkpoint(tmp_path / "hosts")
    saved_dir = save_patched(str(base), tmp_path / "saved", mode="oattention").directory
    estimator = OTabPFNRegressor(**_kwargs(model_path=str(saved_dir))).fit(X, y)
    estimator.save_fit_state(tmp_path / "fit.tabpfn_fit")
    tiny_v3_checkpoint(tmp_path / "hosts", seed=1)  # another host under the base's name
    with pytest.raises(
        FitStateError,
        match=r"fit.tabpfn_fit: .*SavedModelError: .*its base .* "
        r"changed since the retrofit was saved.*--force'\); fit and save again$",
    ):
        OTabPFNRegressor.load_from_fit_state(tmp_path / "fit.tabpfn_fit", device="cpu")


def test_a_model_patched_by_the_caller_is_patched_again_on_load(tmp_path):
    X, y = _regression_data()
    specs = tiny_host_specs("tabpfn_v2_5")
    patch(specs.model, "full-o")
    estimator = OTabPFNRegressor(**_kwargs(mode="none", model_path=specs)).fit(X, y)
    loaded = _round_trip(estimator, tmp_path)
    assert is_patched(loaded.models_[0]) and loaded.models_[0] is not specs.model
    assert _regressor_outputs(loaded, X[:7]) == _regressor_outputs(estimator, X[:7])
    plain = OTabPFNRegressor(**_kwargs(mode="none", model_path=tiny_host_specs("tabpfn_v2_5")))
    assert not np.array_equal(plain.fit(X, y).predict(X[:7]), loaded.predict(X[:7]))


def test_a_constant_target_round_trips(checkpoints, tmp_path):
    X, _ = _regression_data()
    estimator = OTabPFNRegressor(**_kwargs(model_path=str(checkpoints["regressor"])))
    estimator.fit(X, np.full(len(X), 3.5))
    loaded = _round_trip(estimator, tmp_path)
    assert _regressor_outputs(loaded, X[:7]) == _regressor_outputs(estimator, X[:7])


# What a fit state refuses to save.


def test_saving_needs_a_fit_an_integer_seed_the_fitted_parameters_and_the_suffix(
    checkpoints, tmp_path
):
    X, y = _regression_data()
    estimator = OTabPFNRegressor(**_kwargs(model_path=str(checkpoints["regressor"])))
    with pytest.raises(FitStateError, match="not fitted with fit"):
        estimator.save_fit_state(tmp_path / "a.tabpfn_fit")
    estimator.fit(X, y)
    with pytest.raises(FitStateError, match=r"must end with \.tabpfn_fit"):
        estimator.save_fit_state(tmp_path / "a.zip")
    estimator.set_params(n_estimators=3)
    with pytest.raises(FitStateError, match="n_estimators changed since the fit"):
        estimator.save_fit_state(tmp_path / "a.tabpfn_fit")
    estimator.set_params(random_state=None).fit(X, y)
    with pytest.raises(FitStateError, match="random_state=None"):
        estimator.save_fit_state(tmp_path / "a.tabpfn_fit")
    assert not list(tmp_path.iterdir())


def test_an_input_that_cannot_be_stored_as_data_is_refused_by_name(checkpoints, tmp_path):
    X, y = _regression_data()
    odd = np.empty((len(X), 1), dtype=object)
    odd[:, 0] = [complex(v, 0) for v in X[:, 0]]  # no JSON form, no .npy without pickle
    estimator = OTabPFNRegressor(**_kwargs(model_path=str(checkpoints["regressor"])))
    estimator.fit(X, y)
    estimator.__dict__["_fit_record"] = type(estimator.__dict__["_fit_record"])(
        odd, y, estimator.get_params(deep=False)
    )
    with pytest.raises(FitStateError, match=r"X is stored as data only.*complex"):
        estimator.save_fit_state(tmp_path / "a.tabpfn_fit")


# What a fit state refuses to load.


@pytest.fixture
def saved(checkpoints, tmp_path) -> Path:
    X, y = _regression_data()
    estimator = OTabPFNRegressor(**_kwargs(mode="full-o", model_path=str(checkpoints["regressor"])))
    path = tmp_path / "saved.tabpfn_fit"
    estimator.fit(X, y).save_fit_state(path)
    return path


class _Payload:
    """Unpickling it creates ``marker``: the proof that a pickle ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_the_payload_used_below_runs_when_unpickled(tmp_path):
    marker = tmp_path / "ran"
    pickle.loads(pickle.dumps(_Payload(marker)))
    assert marker.exists()


def test_a_member_holding_a_pickle_is_refused_unread(saved, tmp_path):
    marker = tmp_path / "ran"
    target = rewrite(
        saved,
        tmp_path / "extra.tabpfn_fit",
        replace={"fitted_attrs.joblib": pickle.dumps(_Payload(marker))},
    )
    with pytest.raises(FitStateError, match=r"holds fitted_attrs.joblib.*left unread"):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")
    assert not marker.exists()


def test_a_pickled_object_array_in_place_of_the_training_data_is_refused(saved, tmp_path):
    marker = tmp_path / "ran"
    array = np.empty(1, dtype=object)
    array[0] = _Payload(marker)
    with (tmp_path / "X.npy").open("wb") as fh:
        np.save(fh, array, allow_pickle=True)
    # Digests recomputed: the check behind them must hold against a forger too.
    target = rewrite(
        saved,
        tmp_path / "npy.tabpfn_fit",
        replace={"X.npy": (tmp_path / "X.npy").read_bytes()},
        forge=True,
    )
    with pytest.raises(
        FitStateError, match=r"npy.tabpfn_fit: a stored training input .*unreadable"
    ):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")
    assert not marker.exists()


def test_tabpfns_own_fit_state_is_refused_without_running_its_pickles(checkpoints, tmp_path):
    X, y = _regression_data()
    path = tmp_path / "tabpfn.tabpfn_fit"
    TabPFNRegressor(**_kwargs(model_path=str(checkpoints["regressor"]))).fit(X, y).save_fit_state(
        path
    )
    marker = tmp_path / "ran"
    with (
        zipfile.ZipFile(path) as original,
        zipfile.ZipFile(tmp_path / "evil.tabpfn_fit", "w") as evil,
    ):
        for name in original.namelist():
            data = (
                pickle.dumps(_Payload(marker))
                if name == "fitted_attrs.joblib"
                else original.read(name)
            )
            evil.writestr(name, data)
    target = tmp_path / "evil.tabpfn_fit"
    with pytest.raises(FitStateError, match=r"tabpfn's own fit state.*unpickling"):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")
    assert not marker.exists()
    joblib.load(zipfile.ZipFile(target).open("fitted_attrs.joblib"))  # tabpfn's loader would
    assert marker.exists()


def test_a_file_that_is_not_a_fit_state_names_itself(tmp_path):
    path = tmp_path / "junk.tabpfn_fit"
    path.write_bytes(b"not a zip archive at all")
    with pytest.raises(FitStateError, match=r"junk.tabpfn_fit is not a readable fit state"):
        OTabPFNRegressor.load_from_fit_state(path)
    with pytest.raises(FitStateError, match="no fit state at"):
        OTabPFNRegressor.load_from_fit_state(tmp_path / "missing.tabpfn_fit")


def test_a_manifest_of_another_format_is_refused(saved, tmp_path):
    target = rewrite(
        saved, tmp_path / "format.tabpfn_fit", edit=lambda m: m.update(format="something-else/9")
    )
    with pytest.raises(FitStateError, match="has format 'something-else/9'"):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")


def test_a_forged_manifest_is_refused_by_the_checks_behind_its_digests(saved, tmp_path):
    """Digests recomputed after each edit: the refit and the parameter check still refuse."""
    target = rewrite(
        saved,
        tmp_path / "settings.tabpfn_fit",
        edit=lambda m: m["settings"].update(tau=0.5),
        forge=True,
    )
    with pytest.raises(FitStateError, match="differs from the saved fit in its settings"):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")
    target = rewrite(
        saved,
        tmp_path / "params.tabpfn_fit",
        edit=lambda m: m["params"].update(not_a_parameter=1),
        forge=True,
    )
    with pytest.raises(FitStateError, match=r"params.tabpfn_fit: .*not_a_parameter"):
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")


def test_a_manifest_pointed_at_a_pickled_checkpoint_does_not_run_it(saved, tmp_path):
    marker = tmp_path / "ran"
    evil = tmp_path / "evil_v3.ckpt"
    torch.save({"state_dict": {}, "payload": _Payload(marker)}, evil)
    target = rewrite(
        saved,
        tmp_path / "ckpt.tabpfn_fit",
        edit=lambda m: m.update(model_path={"one": {"path": str(evil)}}),
        forge=True,
    )
    with pytest.raises(FitStateError, match=r"ckpt\.tabpfn_fit: refitting .*evil_v3\.ckpt") as info:
        OTabPFNRegressor.load_from_fit_state(target, device="cpu")
    assert isinstance(info.value.__cause__, UnsafeCheckpointError)
    assert not marker.exists()


def test_a_regressor_fit_is_not_loaded_as_a_classifier(saved):
    with pytest.raises(FitStateError, match="fit of OTabPFNRegressor, not OTabPFNClassifier"):
        OTabPFNClassifier.load_from_fit_state(saved, device="cpu")


def test_a_checkpoint_file_changed_since_the_save_is_caught(tmp_path):
    X, y = _regression_data()
    folder = tmp_path / "hosts"
    checkpoint = tiny_v3_checkpoint(folder, seed=0)
    estimator = OTabPFNRegressor(**_kwargs(mode="full-o", model_path=str(checkpoint))).fit(X, y)
    estimator.save_fit_state(tmp_path / "a.tabpfn_fit")
    tiny_v3_checkpoint(folder, seed=1)  # the same file name, other weights
    with pytest.raises(FitStateError, match="differs from the saved fit in its model weight"):
        OTabPFNRegressor.load_from_fit_state(tmp_path / "a.tabpfn_fit", device="cpu")


# Where a fit state is written.


def test_saving_onto_a_directory_is_refused_in_one_line(checkpoints, tmp_path):
    X, y = _regression_data()
    estimator = OTabPFNRegressor(**_kwargs(model_path=str(checkpoints["regressor"]))).fit(X, y)
    folder = tmp_path / "fit.tabpfn_fit"
    folder.mkdir()
    with pytest.raises(FitStateError, match=r"fit\.tabpfn_fit: it is a directory") as info:
        estimator.save_fit_state(folder)
    assert "\n" not in str(info.value)
    with pytest.raises(FitStateError, match=r"fit\.tabpfn_fit: it is a directory"):
        OTabPFNRegressor.load_from_fit_state(folder)
    assert listing(tmp_path) == ["fit.tabpfn_fit"] and listing(folder) == []


def test_a_saved_file_gets_the_umask_mode_and_a_replaced_one_keeps_its_own(
    checkpoints, tmp_path, umask
):
    """As ``open(path, "w")`` would; not 0600 from the temporary file."""
    X, y = _regression_data()
    estimator = OTabPFNRegressor(**_kwargs(model_path=str(checkpoints["regressor"]))).fit(X, y)
    umask(0o022)
    estimator.save_fit_state(tmp_path / "a.tabpfn_fit")
    assert file_mode(tmp_path / "a.tabpfn_fit") == 0o644
    umask(0o027)
    estimator.save_fit_state(tmp_path / "b.tabpfn_fit")
    assert file_mode(tmp_path / "b.tabpfn_fit") == 0o640
    os.chmod(tmp_path / "a.tabpfn_fit", 0o600)
    estimator.save_fit_state(tmp_path / "a.tabpfn_fit")
    assert file_mode(tmp_path / "a.tabpfn_fit") == 0o600


def _save_killed_half_way(path: Path) -> None:
    """A forked child's body: saves a fit state to ``path``, kill -9 after the first member."""
    real_writestr = zipfile.ZipFile.writestr

    def writestr_then_die(self, name, data, *args, **kwargs):
        real_writestr(self, name, data, *args, **kwargs)
        self.fp.flush()
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9 half way through the archive

    zipfile.ZipFile.writestr = writestr_then_die
    X = np.arange(12.0).reshape(4, 3)
    record = FitRecord(X, X[:, 0], {"random_state": 0, "model_path": "embedded"})
    write_fit_state(
        path, estimator="OTabPFNRegressor", record=record, settings={}, report_digests=[],
        weights=[],
    )  # fmt: skip


def test_a_killed_saves_temporary_file_is_removed_by_the_next_save(
    checkpoints, tmp_path, monkeypatch
):
    """kill -9 mid-save leaves a hidden partial file; the next save to that path removes it.

    Killed saves do not pile up (each removes the one before), and a temporary
    file of a save still running (this process's) is left alone.
    """
    path = tmp_path / "fit.tabpfn_fit"
    seen = []
    for _ in range(2):
        status = forks.wait(forks.fork(lambda: _save_killed_half_way(path)))
        assert forks.killed_by_sigkill(status), status
        seen.append(listing(tmp_path))
    assert [len(names) for names in seen] == [1, 1] and seen[0] != seen[1]
    assert seen[1][0].startswith(".fit.tabpfn_fit.tmp-") and not path.exists()
    busy = tmp_path / f".fit.tabpfn_fit.tmp-{os.getpid()}-abcd1234.tmp"
    busy.write_bytes(b"a save at work")
    X, y = _regression_data()
    estimator = OTabPFNRegressor(**_kwargs(model_path=str(checkpoints["regressor"]))).fit(X, y)
    estimator.save_fit_state(path)
    assert listing(tmp_path) == sorted([busy.name, "fit.tabpfn_fit"])
    OTabPFNRegressor.load_from_fit_state(path, device="cpu")
