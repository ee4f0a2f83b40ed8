"""``tabpfn-retrofit predict-batch``: many datasets in one batched prediction.

A manifest lists the datasets, as JSON (a list of objects, or
``{"target": COL, "datasets": [...]}``) or as CSV with a header; each entry
has ``train`` and ``test`` (CSV files; relative paths are read from the
manifest's folder), and optionally ``name`` (default: its position),
``target`` (default: ``--target``) and ``sample_weight``, a column of the
train file holding each row's weight (not a feature; a JSON manifest may give
one for every entry beside ``target``): that dataset's rows count that many
times, as ``fit(..., sample_weight=)`` counts them. Every dataset is predicted by
:func:`retrofit.batching.regression.predict_batched` (regression) or
:func:`retrofit.batching.classification.predict_proba_batched` (classification);
ragged datasets share null-padded ICL forwards on a patched host. The task is
``--task``, or with ``--task auto`` (the default) the model's and the
targets' (:mod:`retrofit.cli.tasks`): classification for a classifier
checkpoint, regression for a regressor checkpoint; for a model that does both
(``embedded``, a version alias, a v3.5 file) classification when the train
targets hold text, regression when they are numbers (a target mixing both, or
a batch of both kinds, asks for ``--task``). One file per dataset,
``OUT_DIR/<name>.csv`` with the columns ``row``, the target (when the test
file has it) and ``prediction`` (the predicted value, or the most probable
class label), and for classification one column of probabilities per class
of the dataset, named by the class label, is written once every prediction
is made, each atomically: a
failed prediction writes nothing, a failed write leaves no file half-written
(the files written before it stay); ``OUT_DIR`` is created then if it is
missing. No prediction file may replace the manifest or an input file, even
with ``--force``. An error about one dataset names it, tabpfn's included when
that dataset fails on its own; tabpfn's refusal of a whole ragged batch (an
unpatched host) names none.

:func:`add_parser` registers the command on the console script's parser,
:func:`run` runs it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from retrofit.batching.bounds import check_max_padded_fraction
from retrofit.batching.classification import predict_proba_batched
from retrofit.batching.dispatch import check_batch_lists
from retrofit.batching.regression import predict_batched
from retrofit.classifier import OTabPFNClassifier
from retrofit.cli.console import naming_limit_option, parse_precision, run_command
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
from retrofit.cli.outputs import check_output_dir, same_file
from retrofit.cli.tasks import TextTarget, choose_task
from retrofit.errors import BatchInputError, CommandError, ManifestError
from retrofit.files import missing_dirs, remove_empty_dirs
from retrofit.regressor import OTabPFNRegressor

__all__ = ["read_manifest", "run"]

PROG = "tabpfn-retrofit predict-batch"
#: The columns of a prediction file besides the known target; a target of one of
#: these names would overwrite it (or be overwritten).
OUTPUT_COLUMNS = ("row", "prediction")
#: The progress bars' labels, by phase of the batch (retrofit.batching.engine.Progress).
_PROGRESS_LABELS = {"fit": "datasets fitted", "embed": "datasets embedded", "icl": "ICL forwards"}


def read_manifest(path: str | Path, default_target: str | None = None) -> list[dict[str, Any]]:
    """The manifest's entries: ``name``, ``train``, ``test``, ``target``, ``sample_weight``.

    Raises:
        ManifestError: A missing or unreadable manifest, an entry without
            ``train``/``test``/target, a field that is not text, a target named
            like an output column (:data:`OUTPUT_COLUMNS`), or two entries with
            one name.
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise ManifestError(f"manifest {path} is a directory; give the .json or .csv file itself")
    if not path.is_file():
        raise ManifestError(f"manifest not found: {path}")
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(path.read_text())
            default_weights = None
            if isinstance(data, dict):
                default_target = data.get("target", default_target)
                default_weights = data.get("sample_weight")
                data = data.get("datasets")
            if not isinstance(data, list) or not all(isinstance(e, dict) for e in data):
                raise ManifestError(f"{path}: expected a list of dataset objects")
            raw = data
        else:
            default_weights = None
            raw = pd.read_csv(path, dtype=str, keep_default_na=False).to_dict("records")
    except (json.JSONDecodeError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ManifestError(f"cannot read manifest {path}: {err}") from None
    if not raw:
        raise ManifestError(f"manifest {path} lists no datasets")
    for key, value in (("target", default_target), ("sample_weight", default_weights)):
        if not isinstance(value, (str, type(None))):
            raise ManifestError(
                f"{path}: {key!r} must be a column name (text), got {type(value).__name__}"
            )
    entries = []
    for i, entry in enumerate(raw):
        name = entry.get("name")
        if name is None or name == "":
            name = str(i)
        elif isinstance(name, int) and not isinstance(name, bool):
            name = str(name)  # a JSON number names a dataset as its digits do
        for key in ("name", "train", "test", "target", "sample_weight"):
            value = name if key == "name" else entry.get(key)
            if value is not None and not isinstance(value, str):
                raise ManifestError(
                    f"{path}: dataset {i}: {key!r} must be text, got {type(value).__name__} "
                    f"{value!r}"
                )
        where = f"dataset {i} ({name})"
        for key in ("train", "test"):
            if not entry.get(key):
                raise ManifestError(f"{where}: the manifest gives no {key!r} file")
        target = entry.get("target") or default_target
        if not target:
            raise ManifestError(f"{where}: no target column (give one or use --target)")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ManifestError(f"{where}: the name must be letters, digits, '_', '.', '-'")
        if target in OUTPUT_COLUMNS:
            raise ManifestError(
                f"{where}: the target column {target!r} has the name of an output column "
                f"({', '.join(OUTPUT_COLUMNS)}); rename it"
            )
        weights = entry.get("sample_weight") or default_weights or None
        if weights is not None and weights == target:
            raise ManifestError(f"{where}: the sample_weight column {weights!r} is the target")
        entries.append(
            {
                "name": name,
                "train": path.parent / Path(entry["train"]).expanduser(),
                "test": path.parent / Path(entry["test"]).expanduser(),
                "target": str(target),
                "sample_weight": weights,
            }
        )
    names = [e["name"] for e in entries]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ManifestError(f"manifest {path} repeats the dataset name(s) {', '.join(dupes)}")
    return entries


def _read_tables(entry: dict[str, Any], i: int) -> tuple[Any, Any, list[str]]:
    """The train and test tables of one manifest entry, and its feature columns.

    Read as ``predict`` reads its files (:mod:`retrofit.cli.csv_tables`): feature
    columns as pandas parsed them (text stays text, for tabpfn); a refusal names
    the dataset.
    """
    target, weights = entry["target"], entry.get("sample_weight")
    try:
        train = read_csv_table(entry["train"], "train", min_rows=2)
        if target not in train.columns:
            raise CommandError(f"target column {target!r} not in {entry['train']}")
        if weights is not None:  # refused before the test file is read, as predict does
            sample_weights(train, weights, entry["train"], option="sample_weight")
        features = [c for c in train.columns if c not in (target, weights)]
        if not features:
            raise CommandError(f"{entry['train']} has no feature columns besides {target!r}")
        test = read_csv_table(entry["test"], "test")
        missing = [c for c in features if c not in test.columns]
        if missing:
            raise CommandError(f"{entry['test']} lacks feature column(s) {missing}")
        refuse_infinite_features(train[features], entry["train"])
        refuse_infinite_features(test[features], entry["test"])
        refuse_stray_text(train[features], entry["train"])
        refuse_stray_text(test[features], entry["test"])
    except CommandError as err:
        raise ManifestError(f"{_where(entry, i)}: {err}") from None
    return train, test, features


def _weights(entry: dict[str, Any], i: int, train: Any) -> np.ndarray | None:
    """The train rows' weights of an entry with a ``sample_weight`` column; None without."""
    if entry.get("sample_weight") is None:
        return None
    try:
        return sample_weights(train, entry["sample_weight"], entry["train"], option="sample_weight")
    except CommandError as err:
        raise ManifestError(f"{_where(entry, i)}: {err}") from None


def _where(entry: dict[str, Any], i: int) -> str:
    return f"dataset {i} ({entry['name']})"


def _targets(
    entry: dict[str, Any], i: int, train: Any, test: Any, task: str
) -> tuple[np.ndarray, np.ndarray | None]:
    """``y_train, y_test or None`` of one entry: numeric, or class labels read alike.

    A regression target is numeric; class labels are read from the train and
    test files alike (:func:`retrofit.cli.csv_tables.class_labels`), none missing
    in the train file. A refusal names the dataset.
    """
    target = entry["target"]
    known_test = test if target in test.columns else None
    try:
        if task == "classification":
            reserved = {*OUTPUT_COLUMNS, target}
            return class_labels(
                target, train, entry["train"], known_test, entry["test"], reserved=reserved
            )
        y_train = numeric_target(train, target, entry["train"], allow_missing=False)
        y_test = None
        if known_test is not None:
            y_test = numeric_target(known_test, target, entry["test"], allow_missing=True)
    except CommandError as err:
        raise ManifestError(f"{_where(entry, i)}: {err}") from None
    return y_train, y_test


def _batch_task(args: argparse.Namespace, entries: list[dict[str, Any]], tables: list) -> str:
    """``--task``, or with ``auto`` the model's and the targets' (printed, with the reason)."""
    text = numeric = None
    target = entries[0]["target"]  # the column the reason names: the text one, if any
    for i, (entry, (train, _, _)) in enumerate(zip(entries, tables, strict=True)):
        found = first_text_label(train, entry["target"])
        where = f"{_where(entry, i)} {entry['train']}"
        if found is not None and text is None:
            text, target = TextTarget(where, *found), entry["target"]
        if found is None and numeric is None:
            numeric = f"the target column {entry['target']!r} of {where}"
    task, reason = choose_task(args.task, args.model, target, text, numeric)
    if reason is not None and not args.quiet:
        print(f"[{PROG}] task {task}: {reason}", file=sys.stderr)
    return task


def _refuse_overwriting_inputs(
    manifest: str | Path, entries: list[dict[str, Any]], targets: list[Path]
) -> None:
    """No prediction file may be the manifest or a dataset's train or test file, even with --force.

    Raises:
        ManifestError: Naming the prediction file and the input it would replace.
    """
    inputs = [("the manifest", Path(manifest).expanduser())]
    for i, entry in enumerate(entries):
        for role in ("train", "test"):
            inputs.append((f"the {role} file of dataset {i} ({entry['name']})", entry[role]))
    for target in targets:
        for role, source in inputs:
            if same_file(target, source):
                raise ManifestError(
                    f"--out-dir: the prediction file {target} would replace {role} {source}; "
                    "give another --out-dir"
                )


def _named(err: Exception, names: list[str]) -> str:
    """The message with ``dataset i`` followed by the dataset's name."""
    text = " ".join(str(err).split())
    match = re.match(r"dataset (\d+):", text)
    if match and int(match.group(1)) < len(names):
        i = int(match.group(1))
        return f"dataset {i} ({names[i]}):" + text[match.end() :]
    return text


def _predict_batch(args: argparse.Namespace) -> int:
    if args.max_padded_fraction is not None:
        check_max_padded_fraction(args.max_padded_fraction)  # before any dataset is loaded
    entries = read_manifest(args.manifest, args.target)
    names = [e["name"] for e in entries]
    out_dir = check_output_dir(args.out_dir, option="--out-dir")  # created once all succeed
    targets = [out_dir / f"{name}.csv" for name in names]
    _refuse_overwriting_inputs(args.manifest, entries, targets)
    existing = [str(t) for t in targets if t.exists()]
    if existing and not args.force:
        raise ManifestError(f"prediction file(s) exist (use --force): {', '.join(existing)}")
    tables = [_read_tables(entry, i) for i, entry in enumerate(entries)]
    task = _batch_task(args, entries, tables)
    data = []
    for i, (entry, (train, test, features)) in enumerate(zip(entries, tables, strict=True)):
        y, y_test = _targets(entry, i, train, test, task)
        data.append((train[features], y, test[features], y_test))
    X_train, y_train, X_test = ([d[k] for d in data] for k in range(3))
    check_batch_lists(X_train, y_train, X_test, numeric=task == "regression")
    weights = [
        _weights(entry, i, train)
        for i, (entry, (train, _, _)) in enumerate(zip(entries, tables, strict=True))
    ]

    params: dict[str, Any] = {
        "mode": args.mode,
        "tau": args.tau,
        "support": args.support,
        "eps_den": args.eps_den,
        "model_path": args.model,
        "device": args.device,
        "inference_precision": parse_precision(args.precision),
        "random_state": args.seed,
    }
    if args.n_estimators is not None:
        params["n_estimators"] = args.n_estimators
    if args.ignore_pretraining_limits:
        params["ignore_pretraining_limits"] = True
    # Not fitted: batched_host loads and patches the model once, from these parameters.
    estimator_class = OTabPFNClassifier if task == "classification" else OTabPFNRegressor
    estimator = estimator_class(**params)
    bars: dict[str, Any] = {}

    def progress(phase: str, done: int, total: int) -> None:
        if args.quiet:
            return
        label = _PROGRESS_LABELS[phase]
        if phase not in bars:
            bars[phase] = tqdm(total=total, desc=label, file=sys.stderr)
        bar = bars[phase]
        bar.update(done - bar.n)

    try:
        predict = predict_proba_batched if task == "classification" else predict_batched
        batch = predict(
            estimator.batched_host(),
            X_train,
            y_train,
            X_test,
            max_padded_fraction=args.max_padded_fraction,
            progress=progress,
            sample_weight=None if all(w is None for w in weights) else weights,
        )
    finally:
        for bar in bars.values():
            bar.close()
    created = missing_dirs(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        for entry, (_, y, _, y_test), prediction, path in zip(
            entries, data, batch.results, targets, strict=True
        ):
            frame = pd.DataFrame({"row": np.arange(len(prediction))})
            if y_test is not None:
                frame[entry["target"]] = y_test
            if task == "classification":
                # tabpfn's classes_: the sorted distinct train labels, the columns' order.
                classes = np.unique(y)
                frame["prediction"] = classes[np.argmax(prediction, axis=1)]
                for k, label in enumerate(classes):
                    frame[str(label)] = np.asarray(prediction[:, k], dtype=np.float64)
            else:
                frame["prediction"] = np.asarray(prediction, dtype=np.float64)
            write_csv_atomic(frame, path)
    except BaseException:
        remove_empty_dirs(created)  # a folder this run made, if it holds nothing
        raise
    if not args.quiet:
        how = (
            f"{len(batch.buckets)} length buckets, padded rows "
            f"{batch.stats.padded_row_fraction:.1%}, padded attention cells "
            f"{batch.stats.padded_cell_fraction:.1%}"
            if batch.padded
            else "tabpfn's same-shape predict_batched"
        )
        print(f"[{PROG}] {how}", file=sys.stderr)
    print(f"wrote {len(targets)} prediction files to {out_dir}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Runs ``predict-batch`` under the shared guard: a failure is one line, exit status 2."""
    return run_command(PROG, lambda: naming_limit_option(lambda: _run_naming_the_dataset(args)))


def _run_naming_the_dataset(args: argparse.Namespace) -> int:
    entries_names: list[str] = []
    try:
        entries_names = [e["name"] for e in read_manifest(args.manifest, args.target)]
        return _predict_batch(args)
    except (BatchInputError, ManifestError) as err:
        raise CommandError(_named(err, entries_names)) from err
