"""The one-command retrofit: ``tabpfn-retrofit predict`` and ``tabpfn-retrofit patch``.

``predict`` fits :class:`retrofit.OTabPFNRegressor` (or, for a classifier
model, a target holding text or ``--task classification``,
:class:`retrofit.OTabPFNClassifier`: :mod:`retrofit.cli.tasks`) on a CSV and
writes the predictions for a test CSV (or a held-out fraction of the training
CSV, or with ``--oof K`` every training row out of fold:
:func:`retrofit.cross_val_predict`);
``patch`` saves a retrofit as an adapter: the settings and the identity of the
base model (its name or path and SHA-256), no weights (see
:mod:`retrofit.models.saved`), which ``predict --model DIR`` and
``OTabPFNRegressor(model_path=DIR)`` (``OTabPFNClassifier`` for a classifier) load.

Every failure a user can cause ends in one line on stderr,
``tabpfn-retrofit <command>: error: <what and where>``, and exit status 2;
outputs are written to a temporary name and renamed, so nothing half-written
is left behind (set ``TABPFN_RETROFIT_DEBUG=1`` for the full traceback of an
unexpected error; see :mod:`retrofit.cli.console`). :func:`add_subcommands`
registers both commands on the ``tabpfn-retrofit`` parser, which ``eval.cli``
composes with eval's commands. Building the parsers imports nothing heavy:
each command imports the estimator, pandas and tabpfn when it runs.
"""

from __future__ import annotations

import argparse
import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrofit.batching.bounds import (
    DEFAULT_MAX_PADDED_FRACTION,
    DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE,
)
from retrofit.cli.console import (
    PRECISIONS,
    PROG,
    naming_limit_option,
    parse_precision,
    run_command,
    status,
)
from retrofit.cli.csv_tables import (
    class_labels,
    first_text_label,
    numeric_target,
    read_csv_table,
    refuse_infinite_features,
    refuse_stray_text,
    sample_weights,
    write_csv_atomic,
)
from retrofit.cli.outputs import check_output_dir, check_output_file, same_file
from retrofit.errors import CommandError, InputWarning
from retrofit.models.aliases import AUTO, alias_list, default_tau_text
from retrofit.settings import (
    DEFAULT_QUANTILES,
    MODES,
    SETTING_NAMES,
    SUPPORTS,
    check_given,
    resolved_mode,
)

if TYPE_CHECKING:
    from retrofit.models.loading import ResolvedModel

__all__ = [
    "MODEL_HELP",
    "TAU_DEFAULT_HELP",
    "add_subcommands",
    "run_patch",
    "run_predict",
    "run_predict_batch",
]

#: How ``--model`` names the model, for every command that takes it.
MODEL_HELP = (
    f"the host: {alias_list(auto=True)} (tabpfn's default version, as tabpfn loads it, or "
    "tabpfn's published model of that version, downloaded by tabpfn into its model cache on "
    "first use; all but v2 need tabpfn's licence accepted once and TABPFN_TOKEN set to your "
    "Prior Labs API key; offline, the error says where to put the file), 'embedded' (the "
    "small TabPFN v3 stand-ins shipped with this package: the regressor, or for a "
    "classification task the classifier; both work offline), a .ckpt/.safetensors file, or "
    "a directory written by 'tabpfn-retrofit patch' (default: auto, tabpfn's own default)"
)
#: The default presence scale, for every command that takes ``--tau``.
TAU_DEFAULT_HELP = f"the host's default, {default_tau_text()}"
_SETTINGS_NOTE = (
    "With --model DIR the directory's settings are used; a setting given here must "
    "equal the saved one."
)


POINT_OUTPUTS = ("mean", "median", "mode")

# --- argument parsing -------------------------------------------------------------


def _add_settings(parser: argparse.ArgumentParser, *, mode_default_note: str) -> None:
    parser.add_argument(
        "--mode",
        metavar="{none,oattention,full-o}",
        help=(
            "retrofit mode: 'none' (the host unchanged), 'oattention' (hidden-carrier "
            "OAttention between items) or 'full-o' (OAttention plus O-closed norm, FFN "
            f"and injections) ({mode_default_note})"
        ),
    )
    parser.add_argument(
        "--tau",
        type=float,
        help=(f"presence scale tau > 0 in p = |h|^2 / (tau + |h|^2) (default: {TAU_DEFAULT_HELP})"),
    )
    parser.add_argument(
        "--support",
        metavar="{count,mass}",
        help=(
            "effective number of train rows fed to the learned length scaling: "
            "'count' of non-null rows or presence 'mass' (default count)"
        ),
    )
    parser.add_argument(
        "--eps-den",
        type=float,
        dest="eps_den",
        help="OAttention denominator floor eps_den >= 0 (default 1e-6)",
    )


#: ``--task`` of ``predict`` and ``predict-batch``.
_TASK_ARGUMENT: dict[str, Any] = {
    "choices": ("auto", "regression", "classification"),
    "default": "auto",
    "help": "what to predict (default auto: a classifier checkpoint classifies, a regressor "
    "regresses; a model that does both (embedded, a version alias, v3.5) classifies a "
    "target of text labels, regresses a numeric one and asks for --task when the target "
    "mixes numbers and text; the choice and its reason are printed; classification "
    "writes one probability column per class, named by the class label)",
}


def _add_predict(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "predict",
        help="fit the retrofitted regressor or classifier on a CSV and write predictions",
        description=(
            "Fit the retrofitted TabPFN regressor (or classifier, see --task) on TRAIN and "
            "write predictions for TEST (or for a held-out fraction of TRAIN, or out of "
            "fold for every row of TRAIN with --oof K) to OUT as "
            "CSV with the columns 'row' (0-based data row of the file predicted), the "
            "target (when known) and 'prediction' (or one column 'quantile_Q' per "
            "quantile); a classifier writes the predicted label as 'prediction' and one "
            "probability column per class, named by the class label. When the target is "
            "known, the RMSE of a point prediction (the accuracy of a classifier's) is "
            "printed. Empty cells are missing values; text columns are encoded by tabpfn "
            "as categoricals. " + _SETTINGS_NOTE
        ),
    )
    parser.add_argument("--train", required=True, metavar="TRAIN.csv", help="training data")
    parser.add_argument("--target", required=True, metavar="COL", help="target column name")
    parser.add_argument(
        "--test",
        metavar="TEST.csv",
        help="rows to predict: the training feature columns, the target column optional",
    )
    parser.add_argument(
        "--holdout",
        type=float,
        metavar="F",
        help="instead of --test: predict a random fraction 0 < F < 1 of TRAIN, fit on the rest",
    )
    parser.add_argument(
        "--oof",
        type=int,
        metavar="K",
        help=(
            "instead of --test: out-of-fold predictions for every row of TRAIN, each from "
            "the other K-1 of K folds (shuffled by --seed; the folds' contexts run as one "
            "ragged batch, retrofit.cross_val_predict); a patched mode only, point outputs only"
        ),
    )
    parser.add_argument(
        "--oof-preprocessing",
        choices=("transductive", "per_fold"),
        default=None,
        help=(
            "with --oof: transductive (default) fits the feature preprocessing once on all "
            "rows, no label, and each fold's target side on its train rows; per_fold refits "
            "everything per fold, as k refits would"
        ),
    )
    parser.add_argument("--out", required=True, metavar="PRED.csv", help="predictions file")
    parser.add_argument(
        "--sample-weight",
        dest="sample_weight",
        metavar="COL",
        help=(
            "a column of TRAIN holding each row's weight (finite, >= 0, not all 0; not a "
            "feature): a row of weight k counts as k copies, 0 leaves it out of the fit "
            "(with --holdout the weights of the rows fitted, with --oof each fold's)"
        ),
    )
    parser.add_argument(
        "--force", action="store_true", help="replace --out if it exists (else refused)"
    )
    parser.add_argument("--model", default=AUTO, metavar="MODEL", help=MODEL_HELP)
    parser.add_argument("--task", **_TASK_ARGUMENT)
    _add_settings(parser, mode_default_note="default full-o")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="random seed of the holdout split and the estimator (default 0)",
    )
    parser.add_argument(
        "--n-estimators",
        type=int,
        dest="n_estimators",
        metavar="N",
        help="ensemble size (default: the estimator's)",
    )
    parser.add_argument(
        "--device", default=None, help="torch device, e.g. cpu or cuda (default: the estimator's)"
    )
    parser.add_argument(
        "--precision",
        metavar="{auto,float32,float64}",
        help=(
            "inference precision: 'auto' lets tabpfn pick (bf16/fp16 autocast where "
            "supported), or a fixed dtype (default: the estimator's)"
        ),
    )
    parser.add_argument(
        "--output-type",
        dest="output_type",
        choices=(*POINT_OUTPUTS, "quantiles"),
        help="what to predict (default mean; quantiles when --quantiles is given)",
    )
    parser.add_argument(
        "--quantiles",
        metavar="Q,...",
        help="comma-separated quantiles strictly between 0 and 1 (default 0.1,0.2,...,0.9)",
    )
    parser.add_argument(
        "--categorical",
        metavar="COLS",
        help="comma-separated feature columns to treat as categorical (numbers too; a "
        "column of numbers with a few text cells is refused unless named here)",
    )
    parser.add_argument(
        "--ignore-pretraining-limits",
        dest="ignore_pretraining_limits",
        action="store_true",
        help="fit beyond tabpfn's row and feature limits (e.g. > 5,000 rows on CPU)",
    )
    parser.add_argument("--quiet", action="store_true", help="no status lines on stderr")
    parser.set_defaults(handler=run_predict)
    return parser


def _add_patch(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "patch",
        help="save a retrofit as an adapter: its settings and its base's identity, no weights",
        description=(
            "Patch MODEL with the retrofit settings (which checks the architecture is "
            "supported) and save the retrofit to DIR as an adapter: DIR/retrofit.json "
            "holding the settings (mode, tau, support, eps_den), the base model's identity "
            "(MODEL as a name, or as a checkpoint path: kept when absolute, else written "
            "relative to DIR; its kind and SHA-256) and the package versions. No weights "
            "are copied: loading DIR resolves the base and refuses it, in one line, when it "
            "is missing or its SHA-256 changed. Load it with "
            "'tabpfn-retrofit predict --model DIR', or by its kind with "
            "OTabPFNRegressor(model_path=DIR) or OTabPFNClassifier(model_path=DIR); the "
            "command prints which. A name (embedded, auto, a version alias) patches its "
            "regressor, or its classifier with --task classification."
        ),
    )
    parser.add_argument("--model", default=AUTO, metavar="SRC", help=MODEL_HELP)
    parser.add_argument(
        "--task",
        choices=("auto", "regression", "classification"),
        default="auto",
        help="which kind a name patches (default auto: a name patches its regressor, a file "
        "or directory what it is); a file of the other kind is refused, naming its kind",
    )
    _add_settings(parser, mode_default_note="default full-o")
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="directory to create (or an empty one)"
    )
    parser.add_argument("--force", action="store_true", help="replace DIR if it exists")
    parser.add_argument("--quiet", action="store_true", help="no status lines on stderr")
    parser.set_defaults(handler=run_patch)
    return parser


def _add_predict_batch(subparsers: Any) -> argparse.ArgumentParser:
    """Registers ``predict-batch`` on an ``add_subparsers()`` object (sets ``handler``)."""
    p = subparsers.add_parser(
        "predict-batch",
        help="predict many datasets (ragged ones too) in batched forwards from a manifest",
        description=(
            "Predict many datasets from a manifest (JSON or CSV listing name, train, test "
            "and target per dataset): datasets of different sizes go through the patched "
            "ICL stage in zero-padded, length-bucketed forwards, exactly as one predict "
            "each; one OUT_DIR/<name>.csv of predictions per dataset."
        ),
    )
    p.add_argument("manifest", metavar="MANIFEST", help="JSON or CSV listing train/test files")
    p.add_argument(
        "--out-dir",
        required=True,
        metavar="DIR",
        help="folder for <name>.csv files (created if missing)",
    )
    p.add_argument("--target", metavar="COL", help="target column of entries that name none")
    p.add_argument("--task", **_TASK_ARGUMENT)
    p.add_argument("--model", default=AUTO, metavar="MODEL", help=MODEL_HELP)
    p.add_argument("--mode", choices=MODES, help="retrofit mode (default: full-o)")
    p.add_argument("--tau", type=float, help=f"presence scale (default: {TAU_DEFAULT_HELP})")
    p.add_argument("--support", choices=SUPPORTS, help="n_eff of the length scaling")
    p.add_argument("--eps-den", type=float, dest="eps_den", help="OAttention floor")
    p.add_argument("--n-estimators", type=int, dest="n_estimators", metavar="N")
    p.add_argument("--device", default="auto", help="torch device (default auto)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto")
    p.add_argument("--seed", type=int, default=0, help="estimator random state (default 0)")
    p.add_argument(
        "--max-padded-fraction",
        type=float,
        default=None,
        metavar="F",
        help="bound in [0, 1) on each length bucket's padded share "
        f"(default {DEFAULT_MAX_PADDED_FRACTION_BY_DEVICE['cpu']} on a CPU, "
        f"{DEFAULT_MAX_PADDED_FRACTION} on an accelerator)",
    )
    p.add_argument(
        "--ignore-pretraining-limits",
        dest="ignore_pretraining_limits",
        action="store_true",
        help="fit beyond tabpfn's row and feature limits (e.g. > 5,000 rows on CPU)",
    )
    p.add_argument("--force", action="store_true", help="replace existing prediction files")
    p.add_argument("--quiet", action="store_true", help="no progress bar or status lines")
    p.set_defaults(handler=run_predict_batch)
    return p


def add_subcommands(subparsers: Any) -> None:
    """Register ``predict`` and ``patch`` on an ``add_subparsers()`` object.

    Each parser sets ``handler``: a callable taking the parsed namespace and
    returning the exit status.
    """
    _add_predict(subparsers)
    _add_predict_batch(subparsers)
    _add_patch(subparsers)


# --- shared helpers ---------------------------------------------------------------


def _requested_settings(args: argparse.Namespace) -> dict[str, Any]:
    requested = {name: getattr(args, name) for name in SETTING_NAMES}
    check_given(requested)  # before the data or the model is read
    return requested


def _check_model_argument(model: str, which: str = "regressor") -> ResolvedModel:
    """Resolve ``--model`` early: downloads a missing v2/v3 file, verifies a saved directory."""
    from retrofit.models.loading import resolve_model  # lazy: keeps --help light

    return resolve_model(model, which)


# --- predict ------------------------------------------------------------------------


def _read_predict_tables(args: argparse.Namespace):
    """The train table, the test table (None with ``--holdout``) and the feature names."""
    given = [args.test, args.holdout, args.oof]
    if sum(value is not None for value in given) != 1:
        raise CommandError("give exactly one of --test TEST.csv, --holdout F or --oof K")
    train = read_csv_table(args.train, "train", min_rows=2)
    if args.target not in train.columns:
        raise CommandError(
            f"target column {args.target!r} not in {args.train} "
            f"(columns: {', '.join(map(str, train.columns))})"
        )
    if args.sample_weight is not None:
        if args.sample_weight == args.target:
            raise CommandError(f"--sample-weight {args.sample_weight!r} is the target column")
        sample_weights(train, args.sample_weight, args.train)  # refused before the test file
    features = [c for c in train.columns if c not in (args.target, args.sample_weight)]
    if not features:
        raise CommandError(f"{args.train} has no feature columns besides {args.target!r}")
    refuse_infinite_features(train[features], args.train)
    declared = {name.strip() for name in (args.categorical or "").split(",")}
    refuse_stray_text(train[features], args.train, categorical=declared, option="--categorical")
    if args.test is None:
        return train, None, features
    test = read_csv_table(args.test, "test")
    missing = [c for c in features if c not in test.columns]
    if missing:
        raise CommandError(f"test file {args.test} lacks feature column(s): {', '.join(missing)}")
    refuse_infinite_features(test[features], args.test)
    refuse_stray_text(test[features], args.test, categorical=declared, option="--categorical")
    return train, test, features


def _split_predict_data(args: argparse.Namespace, train, test, features, reserved):
    """Returns X_train, y_train, X_test, y_test (or None), the test row ids, the train weights.

    The weights (``--sample-weight``) are those of the rows fitted: all of
    TRAIN's, or with ``--holdout`` those of the rows fitted on; None without.

    Args:
        args: The parsed arguments.
        train: The train table.
        test: The test table, or None for ``--holdout``.
        features: The feature columns.
        reserved: For a classifier, the prediction file's column names, which
            no class label may take; None for a regressor (a numeric target).
    """
    import numpy as np  # lazy: keeps --help light

    known_test = test if test is not None and args.target in test.columns else None
    if reserved is None:
        y_all = numeric_target(train, args.target, args.train, allow_missing=False)
        y_test = None
        if known_test is not None:
            y_test = numeric_target(known_test, args.target, args.test, allow_missing=True)
    else:  # train and test labels read alike, so equal-looking labels are equal
        y_all, y_test = class_labels(
            args.target, train, args.train, known_test, args.test, reserved=reserved
        )
    X_all = train[features]  # numbers as parsed; text columns stay text, for tabpfn
    w_all = None
    if args.sample_weight is not None:
        w_all = sample_weights(train, args.sample_weight, args.train)

    if args.oof is not None:
        K = args.oof
        if not 2 <= K <= len(y_all):
            raise CommandError(
                f"--oof needs 2 <= K <= {len(y_all)} (the rows of {args.train}), got {K}"
            )
        if len(y_all) - math.ceil(len(y_all) / K) < 2:
            raise CommandError(
                f"--oof {K} of {len(y_all)} rows leaves a fold fewer than 2 train rows; "
                "give fewer folds or more rows"
            )
        rows = np.arange(len(y_all))
        return X_all, y_all, X_all, y_all, rows, w_all
    if args.holdout is not None:
        F = args.holdout
        if not (math.isfinite(F) and 0 < F < 1):
            raise CommandError(f"--holdout must be a fraction 0 < F < 1, got {F}")
        n_test = round(F * len(y_all))
        if n_test < 1 or len(y_all) - n_test < 2:
            raise CommandError(
                f"--holdout {F} of {len(y_all)} rows leaves {n_test} test and "
                f"{len(y_all) - n_test} train rows; need at least 1 and 2"
            )
        order = np.random.default_rng(args.seed).permutation(len(y_all))
        test_rows, train_rows = np.sort(order[:n_test]), np.sort(order[n_test:])
        w_fit = None if w_all is None else w_all[train_rows]
        if w_fit is not None and not (w_fit > 0).any():
            raise CommandError("--holdout leaves only rows of weight 0 to fit on")
        if reserved is not None:
            _warn_held_out_classes(F, y_all[train_rows], y_all[test_rows])
        return (
            X_all.iloc[train_rows],
            y_all[train_rows],
            X_all.iloc[test_rows],
            y_all[test_rows],
            test_rows,
            w_fit,
        )
    return X_all, y_all, test[features], y_test, np.arange(len(test)), w_all


def _warn_held_out_classes(fraction: float, y_train: Any, y_test: Any) -> None:
    """Says which classes ``--holdout`` left without a train row (the model cannot predict them)."""
    import numpy as np  # lazy: keeps --help light

    lacking = np.setdiff1d(np.unique(y_test), np.unique(y_train))
    if lacking.size:
        names = ", ".join(repr(str(c)) for c in lacking[:3])
        more = f" and {lacking.size - 3} more" if lacking.size > 3 else ""
        warnings.warn(
            f"--holdout {fraction} holds out every row of class {names}{more}, so the model "
            "cannot predict it; give another --seed, a smaller --holdout or more rows of it",
            InputWarning,
            stacklevel=2,
        )


def _check_predict_out(args: argparse.Namespace) -> None:
    """``--out`` must be a writable file name that is none of the inputs (before the fit).

    An existing ``--out`` is replaced only with ``--force``, as ``predict-batch``'s files.
    """
    out = check_output_file(args.out, inputs={"train": args.train, "test": args.test})
    if out.exists() and not args.force:
        raise CommandError(f"--out {out} exists; give --force to replace it")


def _output_request(args: argparse.Namespace) -> tuple[str, list[float]]:
    """``--output-type`` and ``--quantiles``: what to predict, and which quantiles."""
    output_type = args.output_type or ("quantiles" if args.quantiles else "mean")
    if args.quantiles is not None and output_type != "quantiles":
        raise CommandError(f"--quantiles needs --output-type quantiles, not {output_type}")
    if args.quantiles is None:
        return output_type, list(DEFAULT_QUANTILES)
    try:
        quantiles = [float(q) for q in args.quantiles.split(",")]
    except ValueError as exc:
        raise CommandError(f"--quantiles must be numbers separated by commas: {exc}") from exc
    if not all(0 < q < 1 for q in quantiles):
        # tabpfn takes 0 and 1 and answers -inf and inf: the ends of its bar
        # distribution's unbounded support, which no prediction file should hold.
        raise CommandError(
            f"--quantiles must lie strictly between 0 and 1 (0 and 1 are the infinite ends "
            f"of the predictive distribution), got {args.quantiles}"
        )
    return output_type, quantiles


def _output_columns(output_type: str, quantiles: list[float]) -> list[str]:
    """The columns of the predictions file besides the known target."""
    if output_type == "quantiles":
        return ["row", *(f"quantile_{q:g}" for q in quantiles)]
    return ["row", "prediction"]


def _check_target_name(target: str, columns: list[str]) -> None:
    """A target named like an output column would overwrite it (or be overwritten)."""
    if target in columns:
        raise CommandError(
            f"--target {target!r} has the name of an output column ({', '.join(columns)}); "
            "rename the target column"
        )


def _categorical_indices(names: str | None, features: list[str]) -> list[int]:
    """Positions of the ``--categorical`` columns among the features."""
    if not names:
        return []
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in features]
    if unknown:
        raise CommandError(
            f"--categorical names no feature column {', '.join(unknown)} "
            f"(features: {', '.join(map(str, features))})"
        )
    return [features.index(name) for name in wanted]


def _predict_task(args: argparse.Namespace, train) -> str:
    """``--task``, or with ``auto`` the model's and the target's (printed, with the reason)."""
    from retrofit.cli.tasks import TextTarget, choose_task  # lazy: loads tabpfn

    found = first_text_label(train, args.target)
    text = None if found is None else TextTarget(str(args.train), *found)
    task, reason = choose_task(args.task, args.model, args.target, text)
    if reason is not None:
        status(args, f"task {task}: {reason}")
    return task


def _predict(args: argparse.Namespace) -> int:
    import numpy as np  # lazy: keeps --help light
    import pandas as pd  # lazy: keeps --help light

    _check_predict_out(args)
    requested = _requested_settings(args)
    if args.precision is not None:
        parse_precision(args.precision)
    if args.n_estimators is not None and args.n_estimators < 1:
        raise CommandError(f"--n-estimators must be >= 1, got {args.n_estimators}")
    train, test, features = _read_predict_tables(args)
    classify = _predict_task(args, train) == "classification"
    if classify and (args.output_type is not None or args.quantiles is not None):
        raise CommandError(
            "--output-type and --quantiles are for regression; a classifier writes the "
            "predicted label and one probability column per class"
        )
    output_type, quantiles = _output_request(args)
    if args.oof is not None and output_type == "quantiles":
        raise CommandError(
            "--oof writes one value per row: give --output-type mean, median or mode, not quantiles"
        )
    if args.oof is None and args.oof_preprocessing is not None:
        raise CommandError("--oof-preprocessing goes with --oof K")
    columns = ["row", "prediction"] if classify else _output_columns(output_type, quantiles)
    _check_target_name(args.target, columns)
    reserved = {*columns, args.target} if classify else None
    X_train, y_train, X_test, y_test, rows, w_train = _split_predict_data(
        args, train, test, features, reserved
    )
    categorical = _categorical_indices(args.categorical, features)
    _refuse_oof_unpatched(args, requested)
    # After the cheap local checks: resolving may download.
    resolved = _check_model_argument(args.model, "classifier" if classify else "regressor")
    _refuse_oof_unpatched(args, requested, resolved)

    from retrofit import OTabPFNClassifier, OTabPFNRegressor  # lazy: keeps --help light

    # The estimator resolves the settings (a saved directory's, else the host's defaults)
    # from the model resolved above: a saved directory is hashed once.
    params: dict[str, Any] = {**requested, "model_path": resolved, "random_state": args.seed}
    if args.n_estimators is not None:
        params["n_estimators"] = args.n_estimators
    if args.device is not None:
        params["device"] = args.device
    if args.precision is not None:
        params["inference_precision"] = parse_precision(args.precision)
    if categorical:
        params["categorical_features_indices"] = categorical
    if args.ignore_pretraining_limits:
        params["ignore_pretraining_limits"] = True
    estimator = (OTabPFNClassifier if classify else OTabPFNRegressor)(**params)
    out = pd.DataFrame({"row": rows})
    if y_test is not None:
        out[args.target] = y_test
    if args.oof is not None:
        prediction = _out_of_fold(
            args, estimator, X_train, y_train, w_train, out, output_type, classify
        )
    else:
        prediction = _fit_and_predict(
            args,
            estimator,
            (X_train, y_train, w_train),
            X_test,
            out,
            output_type,
            quantiles,
            classify,
        )
    path = write_csv_atomic(out, args.out)
    status(args, f"wrote {len(out)} predictions to {path}")

    if y_test is not None and output_type != "quantiles":
        known = pd.notna(y_test)
        if known.any() and classify:
            accuracy = float(np.mean(prediction[known] == y_test[known]))
            print(f"accuracy {accuracy:.6g} on {int(known.sum())} rows with a known label")
        elif known.any():
            rmse = float(np.sqrt(np.mean((prediction[known] - y_test[known]) ** 2)))
            print(f"RMSE {rmse:.6g} on {int(known.sum())} rows with a known target")
    return 0


def _refuse_oof_unpatched(
    args: argparse.Namespace, requested: dict[str, Any], resolved: ResolvedModel | None = None
) -> None:
    """``--oof`` with ``--mode none`` (given, or a saved directory's), in the command's words.

    The folds share one null-padded batch, which needs a patched host.
    """
    if args.oof is None:
        return
    saved = None if resolved is None else resolved.saved_settings
    if resolved_mode(requested, saved) == "none":
        whose = "" if requested["mode"] == "none" else f" (the mode saved in {args.model})"
        raise CommandError(
            f"--oof needs a patched mode, not none{whose}: its folds share one null-padded "
            "batch; give --mode full-o or --mode oattention, or --holdout F for one split "
            "of the unpatched host"
        )


def _out_of_fold(
    args: argparse.Namespace,
    estimator: Any,
    X: Any,
    y: Any,
    w: Any,
    out: Any,
    output_type: str,
    classify: bool,
) -> Any:
    """``--oof K``: every row of TRAIN predicted from the other folds; fills ``out``.

    Returns the point predictions (a classifier's labels), for the printed score.
    """
    import numpy as np  # lazy: keeps --help light
    from sklearn.model_selection import KFold  # lazy: keeps --help light

    from retrofit import cross_val_predict  # lazy: keeps --help light

    folds = KFold(args.oof, shuffle=True, random_state=args.seed)
    preprocessing = args.oof_preprocessing or "transductive"
    params = None if w is None else {"sample_weight": w}
    what = "class probabilities" if classify else output_type
    status(
        args,
        f"out-of-fold predictions ({what}) for {len(y)} rows x {X.shape[1]} features "
        f"in {args.oof} folds, one ragged batch, {preprocessing} preprocessing "
        f"(model {args.model})",
    )
    if classify:
        proba = np.asarray(
            cross_val_predict(
                estimator,
                X,
                y,
                cv=folds,
                method="predict_proba",
                preprocessing=preprocessing,
                params=params,
            ),
            np.float64,
        )
        classes = np.unique(np.asarray(y))  # cross_val_predict's columns: every class of y
        prediction = classes[np.argmax(proba, axis=1)]  # tabpfn's predict
        out["prediction"] = prediction
        for k, label in enumerate(classes):
            out[str(label)] = proba[:, k]
        return prediction
    method = "predict" if output_type == "mean" else output_type
    prediction = np.asarray(
        cross_val_predict(
            estimator, X, y, cv=folds, method=method, preprocessing=preprocessing, params=params
        ),
        np.float64,
    )
    out["prediction"] = prediction
    return prediction


def _fit_and_predict(
    args: argparse.Namespace,
    estimator: Any,
    fitted_on: tuple[Any, Any, Any],
    X_test: Any,
    out: Any,
    output_type: str,
    quantiles: list[float],
    classify: bool,
) -> Any:
    """``--test`` and ``--holdout``: one fit on the train rows; fills ``out``.

    ``fitted_on``: the train rows, their targets and their weights (or None).
    Returns the point predictions (a classifier's labels), or None for quantiles.
    """
    import numpy as np  # lazy: keeps --help light

    X_train, y_train, w_train = fitted_on
    weighted = "" if w_train is None else f", weighted by {args.sample_weight!r}"
    status(
        args,
        f"fitting on {len(y_train)} rows x {X_train.shape[1]} features{weighted} "
        f"(model {args.model})",
    )
    if w_train is None:
        estimator.fit(X_train, y_train)
    else:
        estimator.fit(X_train, y_train, sample_weight=w_train)
    settings = estimator.settings_
    status(
        args,
        f"fitted with mode {settings['mode']}, tau {settings['tau']}, "
        f"support {settings['support']}, eps_den {settings['eps_den']}",
    )
    what = "class probabilities" if classify else output_type
    status(args, f"predicting {len(X_test)} rows ({what})")
    prediction = None
    if classify:
        proba = np.asarray(estimator.predict_proba(X_test), dtype=np.float64)
        prediction = estimator.classes_[np.argmax(proba, axis=1)]  # tabpfn's predict
        out["prediction"] = prediction
        for k, label in enumerate(estimator.classes_):
            out[str(label)] = proba[:, k]
    elif output_type == "quantiles":
        predicted = estimator.predict(X_test, output_type="quantiles", quantiles=quantiles)
        for q, values in zip(quantiles, predicted, strict=True):
            out[f"quantile_{q:g}"] = np.asarray(values, dtype=np.float64)
    else:
        prediction = np.asarray(estimator.predict(X_test, output_type=output_type), np.float64)
        out["prediction"] = prediction
    return prediction


def _check_patch_out(args: argparse.Namespace) -> Path:
    """``--out`` may replace only a saved directory or a file (``--force``), never ``--model``."""
    from retrofit.models import saved  # lazy: keeps --help light

    out = Path(args.out).expanduser()
    if Path(args.model).expanduser().is_file() and same_file(out, args.model):
        raise CommandError(f"--out {out} is the --model file; give a new directory")
    try:
        saved.check_replaceable(out, overwrite=args.force)
    except FileExistsError as exc:
        raise CommandError(f"--out {exc}") from exc
    # retrofit.json is written inside DIR: DIR itself when it exists, else its folder.
    in_place = out.is_dir() and not out.is_symlink()
    check_output_dir(
        out if in_place else out.parent, option=f"--out {out}" + ("" if in_place else ": folder")
    )
    return out


def _patch(args: argparse.Namespace) -> int:
    from retrofit.cli.tasks import choose_task  # lazy: loads tabpfn
    from retrofit.models.kinds import ESTIMATOR_NAMES  # lazy: imports tabpfn
    from retrofit.models.saved import save as saving  # lazy: keeps --help light

    requested = _requested_settings(args)
    out = _check_patch_out(args)
    task = "regression"
    if args.task != "auto":  # as predict: a task the model cannot run is one line, its kind named
        task, _ = choose_task(args.task, args.model, "", None)
    which = "classifier" if task == "classification" else "regressor"
    model = _check_model_argument(args.model, which)  # once: a saved directory is read here
    status(args, f"patching {args.model}")
    # Re-patching a saved directory starts from its settings; any given here replace them.
    result = saving.save_patched(model, out, **requested, overwrite=args.force)
    settings, base = result.settings, result.base
    status(
        args,
        f"saved retrofit.json (mode {settings.mode}, tau {settings.tau}, support "
        f"{settings.support}, eps_den {settings.eps_den}; base {base.label!r}, "
        f"SHA-256 {base.sha256[:12]}; no weights)",
    )
    where = str(result.directory)
    loaders = [f"{ESTIMATOR_NAMES[kind]}(model_path={where!r})" for kind in result.kinds]
    print(
        f"saved retrofitted {' and '.join(result.kinds)} to {where} (an adapter of "
        f"{base.label!r}); load it with {' or '.join(loaders)} or "
        f"'tabpfn-retrofit predict --model {where}'"
    )
    return 0


def run_predict(args: argparse.Namespace) -> int:
    """Runs ``predict`` on parsed arguments; returns the exit status."""
    return run_command(f"{PROG} predict", lambda: naming_limit_option(lambda: _predict(args)))


def run_predict_batch(args: argparse.Namespace) -> int:
    """Runs ``predict-batch`` on parsed arguments; returns the exit status."""
    from retrofit.cli import predict_batch  # pandas, torch and the estimator, when it runs

    return predict_batch.run(args)


def run_patch(args: argparse.Namespace) -> int:
    """Runs ``patch`` on parsed arguments; returns the exit status."""
    return run_command(f"{PROG} patch", lambda: _patch(args))
