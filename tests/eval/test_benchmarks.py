"""The benchmark's structure (never its speed) and the GPU check's no-CUDA path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eval.benchmarks import memory, memory_child, speed, speed_markdown
from eval.benchmarks.attention import attention_inputs
from eval.benchmarks.shapes import ICL_DATASETS, QUICK_SHAPES, Shape, icl_shapes
from eval.benchmarks.timing import paired_ratio, time_interleaved
from eval.cli import main
from tests.helpers.exactness import MODEL_ULPS
from tests.helpers.oattention_inputs import reference64
from tests.helpers.tiny_models import TINY_V3_CONFIG

REPO = Path(__file__).resolve().parents[2]


def test_paired_ratio_median_and_ci_bracket_it():
    den = [1.0] * 30
    num = [1.1] * 10 + [1.2] * 10 + [1.3] * 10
    r = paired_ratio(num, den)
    assert r["ratio"] == pytest.approx(1.2)
    assert r["ci_low"] <= r["ratio"] <= r["ci_high"]
    assert 1.1 <= r["ci_low"] and r["ci_high"] <= 1.3
    with pytest.raises(ValueError):
        paired_ratio([1.0], [1.0, 2.0])


def test_time_interleaved_runs_every_peer_every_round():
    calls = {"a": 0, "b": 0}

    def peer(name):
        def fn():
            calls[name] += 1

        return fn

    times, inner = time_interleaved(
        {"a": peer("a"), "b": peer("b")}, repeats=4, warmup=1, min_time_s=0.0
    )
    assert inner == 1
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4}
    # warm-up, calibration and the timed rounds
    assert calls == {"a": 1 + 1 + 4, "b": 1 + 1 + 4}


def test_attention_inputs_have_sdpa_layout_and_null_tokens():
    shape = Shape(2, 3, 40, 300, 8)
    x = attention_inputs(shape, seed=1)
    assert x["q"].shape == (2, 3, 40, 8) and x["k"].shape == (2, 3, 300, 8)
    assert x["p_q"].shape == (2, 40) and x["p_k"].shape == (2, 300)
    assert float(x["p_k"].min()) == 0.0 and float(x["p_k"].max()) < 1.0


def test_icl_shapes_follow_the_host_config(tiny_v3_path):
    shapes, source = icl_shapes(str(tiny_v3_path))
    width = TINY_V3_CONFIG["embed_dim"] * TINY_V3_CONFIG["feat_agg_num_cls_tokens"]
    heads = TINY_V3_CONFIG["icl_num_heads"]
    assert [s.label for s in shapes] == list(ICL_DATASETS)
    for s in shapes:
        assert (s.B, s.H, s.D) == (1, heads, width // heads)
        assert s.S == s.L - -(-s.L // 4)  # the 75/25 split's training rows
    assert source["icl_width"] == width


def test_quick_bench_writes_json_and_markdown(tiny_v3_path, tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--quick", "--out", str(out), "--model", str(tiny_v3_path), "--threads", "1"]
    status = main(argv)
    assert status == 0
    printed = capsys.readouterr().out
    # Every part prints Markdown tables, never raw Python dicts and lists.
    assert "{'" not in printed and "[{" not in printed and "': " not in printed, printed
    for table in ("| peer | extra peak MiB (median) |", "| peer | median s | ratio to tabpfn",
                  "| torch threads | default CPU s |"):  # fmt: skip
        assert table in printed, printed
    report = json.loads((out / "bench.json").read_text())
    assert report["quick"] is True

    rows = report["attention"]["rows"]
    assert len(rows) == len(QUICK_SHAPES) and report["attention"]["repeats"] == 5
    for row in rows:
        assert set(row["median_ms"]) == {
            "sdpa",
            "oattention",
            "oattention_trusted",
            "oattention_block",
            "kernel_with_bias",
        }
        assert set(row["block_vs_kernel_with_bias"]) == set(row["oattention_vs_kernel_with_bias"])
        for r in row["ratios"].values():
            assert set(r) == {"ratio", "ci_low", "ci_high", "ratio_of_medians"}
            assert 0 < r["ci_low"] <= r["ratio"] <= r["ci_high"]

    mem = report["memory"]
    assert "error" not in mem, mem
    assert set(mem["peers"]) == {"sdpa", "oattention"}
    for m in mem["peers"].values():
        assert len(m["extra_peak_bytes"]) == 1 and m["output_bytes"] > 0

    est = report["estimator"]
    assert "skipped" not in est, est
    (case,) = est["cases"]
    assert case["dataset"] == "qsar_fish" and case["n_train"] == 120
    assert set(case["median_s"]) == {"none", "oattention", "full-o"}
    assert set(est["pooled"]) == {"oattention", "full-o"}

    loop = report["fit_loop"]  # plain tabpfn's loop against ours, on the embedded host
    assert "skipped" not in loop, loop
    assert set(loop["ratios"]) == {"none", "full-o"}
    chunks = report["chunks"]
    assert "skipped" not in chunks, chunks
    assert len(chunks["bit_identical"]) == 1
    # equal up to rounding (tests/helpers/exactness.py), not bit-identical on every CPU
    assert 0 <= chunks["ulps"][0] <= MODEL_ULPS[torch.float32]
    assert [r["threads"] for r in chunks["by_threads"]] == [1]
    assert set(chunks["by_threads"][0]["seconds"]) == {"default", "cache_sized"}

    prov = report["provenance"]
    for key in ("packages", "cpu_model", "threads", "date_utc", "git_commit"):
        assert key in prov
    assert prov["threads"] == 1
    assert "busy_processes" in report["environment"]["start"]

    md = (out / "bench.md").read_text()
    for part in ("memory", "fit_loop", "chunks"):  # printed as bench.md shows it
        assert speed_markdown.part_text(part, report[part]) in md
        assert speed_markdown.part_text(part, report[part]) in printed
    for heading in (
        "## Attention",
        "## Peak memory",
        "## OTabPFNRegressor",
        "## A loop of fit + predict",
        "## Cache-sized chunks",
        "## Environment",
    ):
        assert heading in md


def test_attention_with_two_threads_times_own_work_at_one_thread_too(tmp_path):
    threads = torch.get_num_threads()
    try:
        report = speed.run(tmp_path / "bench", quick=True, threads=2, parts=("attention",))
        assert torch.get_num_threads() == 2  # the one-thread pass restores the setting
    finally:
        torch.set_num_threads(threads)
    one = report["attention"]["one_thread"]
    assert one["threads"] == 1 and len(one["rows"]) == len(QUICK_SHAPES)
    for row in one["rows"]:
        assert set(row["median_ms"]) == {"oattention", "oattention_block", "kernel_with_bias"}
        assert row["ratios"] == {} and row["target"] is None  # no SDPA in this pass
        for key in ("oattention_vs_kernel_with_bias", "block_vs_kernel_with_bias"):
            assert 0 < row[key]["ci_low"] <= row[key]["ratio"] <= row[key]["ci_high"]
    md = (tmp_path / "bench" / "bench.md").read_text()
    assert "### OAttention's own work at one torch thread" in md
    assert "checked entry, 1 thread: medians" in md


def test_missing_host_is_reported_not_fatal(tmp_path):
    report = speed.run(
        tmp_path, quick=True, parts=("estimator",), model_path=str(tmp_path / "absent_v3.ckpt")
    )
    assert "skipped" in report["estimator"]
    assert "Not measured" in (tmp_path / "bench.md").read_text()


def test_gpu_check_dry_run_of_ragged_batches_matches_predict_and_times_the_loop(
    tiny_v3_path, tmp_path
):
    from eval import gpu_check

    out = tmp_path / "gpu"
    argv = [str(out), "--device", "cpu", "--quick", "--parts", "batched"]
    argv += ["--model", str(tiny_v3_path)]
    assert gpu_check.main(argv) == 0
    report = json.loads((out / "gpu_check.json").read_text())["batched"]
    assert report["n_datasets"] == len(report["logprob_gaps"]) == 3
    assert report["padding"]["padded_rows"] > report["padding"]["real_rows"]  # padding checked
    assert report["padding"]["forwards"] < report["n_datasets"]
    # The fp32 bound of tests/retrofit/batching/test_batched.py.
    assert 0 <= report["max_logprob_gap"] <= 1e-5
    assert {"loop", "batched"} <= set(report["case"]["peers"])
    assert "## Ragged batches" in (out / "gpu_check.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message only")
def test_gpu_check_without_cuda_exits_2_with_a_clear_message(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(REPO / "eval" / "gpu_check.py"), str(tmp_path / "gpu")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "CUDA" in proc.stderr and "not available" in proc.stderr
    assert proc.stderr.count("\n") <= 2  # one line, no traceback
    assert not (tmp_path / "gpu").exists()


# --- the CUDA route's logic (GQA fold, bias padding, lse slicing), on CPU -------------


def _emulated_efficient_attention(calls):
    """A float64 stand-in for ``aten._scaled_dot_product_efficient_attention``.

    It enforces what the CUDA kernel requires of its caller (no grouped K/V, a
    bias in the query dtype, expanded to ``(B, H, L, S)`` over a 16-aligned
    row), pads its lse like the kernel and returns NaN rows where every score
    is ``-inf``, as a careless kernel may.
    """

    def op(q, k, v, bias, compute_lse, dropout_p, is_causal, *, scale=None):
        B, H, L, D = q.shape
        assert k.shape[1] == H and v.shape[1] == H, "the kernel has no grouped-query K/V"
        assert bias.dtype == q.dtype and tuple(bias.shape) == (B, H, L, k.shape[2])
        assert B == 1 or bias.stride(0) % 16 == 0, bias.stride()
        assert compute_lse and dropout_p == 0.0 and not is_causal
        s = (q.double() @ k.double().transpose(-1, -2)) / D**0.5 + bias.double()
        lse = torch.logsumexp(s, -1)
        out = torch.softmax(s, -1) @ v.double()
        lse_pad = torch.full((B, H, -(-L // 32) * 32), 1e4)
        lse_pad[..., :L] = lse
        calls.append(tuple(q.shape))
        return out.to(q.dtype), lse_pad, torch.empty(()), torch.empty(())

    return op


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask_kind", [None, "key", "full"])
@pytest.mark.parametrize("dims", [(2, 4, 4, 7, 5, 8), (2, 4, 2, 9, 21, 16), (1, 8, 1, 40, 17, 8)])
def test_cuda_route_logic_with_an_emulated_kernel(monkeypatch, dtype, mask_kind, dims):
    import importlib

    from patches.oattention import oattention

    oa_mod = importlib.import_module("patches.oattention")
    calls = []
    monkeypatch.setattr(oa_mod, "oattention_route", lambda q: "cuda-efficient")
    monkeypatch.setattr(oa_mod, "_efficient_op", lambda: _emulated_efficient_attention(calls))
    B, H, Hkv, L, S, D = dims
    g = torch.Generator().manual_seed(sum(dims))
    q = torch.randn(B, H, L, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    p_q, p_k = torch.rand(B, L, generator=g), torch.rand(B, S, generator=g)
    p_q[0, 0], p_k[0, -1] = 0.0, 0.0
    if B > 1:
        p_k[1] = 0.0  # empty support: the emulated kernel returns NaN rows there
    mask = None
    if mask_kind == "key":
        mask = torch.rand(B, 1, 1, S, generator=g) > 0.3
    elif mask_kind == "full":
        mask = torch.rand(B, H, L, S, generator=g) > 0.3
        mask[0, 0, 1] = False
    for eps_den in (1e-6, 0.0):
        out = oattention(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
        ref = reference64(q, k, v, p_q, p_k, mask=mask, eps_den=eps_den)
        assert out.dtype == dtype and torch.isfinite(out).all()
        assert torch.equal(out[0, :, 0], torch.zeros_like(out[0, :, 0]))
        if B > 1:
            assert torch.equal(out[1], torch.zeros_like(out[1]))
        tol = 1e-6 if dtype == torch.float32 else 3e-2  # bf16: bias and output rounding
        assert (out.double() - ref).abs().max() <= tol
    grouped_fold = Hkv < H and mask_kind != "full"
    assert calls and all(c[1] == (Hkv if grouped_fold else H) for c in calls)


def test_cuda_route_falls_back_to_sink_with_one_warning(monkeypatch):
    import importlib
    import warnings

    from patches.oattention import oattention

    oa_mod = importlib.import_module("patches.oattention")

    def rejecting(*args, **kwargs):
        raise RuntimeError("head dim not supported (emulated)")

    monkeypatch.setattr(oa_mod, "oattention_route", lambda q: "cuda-efficient")
    monkeypatch.setattr(oa_mod, "_efficient_op", lambda: rejecting)
    monkeypatch.setattr(oa_mod, "_FALLBACKS_WARNED", set())
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, n, 12, generator=g) for n in (6, 5, 5))
    p_q, p_k = torch.rand(2, 6, generator=g), torch.rand(2, 5, generator=g)
    p_k[1] = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [oattention(q, k, v, p_q, p_k) for _ in range(3)]
    assert len([w for w in caught if "sink route" in str(w.message)]) == 1
    ref = reference64(q, k, v, p_q, p_k)
    for out in outs:
        assert (out.double() - ref).abs().max() <= 1e-6
        assert torch.equal(out[1], torch.zeros_like(out[1]))


def test_bench_and_gpu_check_raise_the_typed_error_instead_of_a_stand_in_host(tmp_path) -> None:
    from eval.device_checks.null_row import load_host_model
    from retrofit.errors import CheckpointNotFoundError

    missing = tmp_path / "absent_v3.safetensors"
    with pytest.raises(CheckpointNotFoundError, match="absent_v3"):
        icl_shapes(str(missing))
    with pytest.raises(CheckpointNotFoundError, match="absent_v3"):
        load_host_model(str(missing))


# --- a memory probe that reads nothing ------------------------------


def test_a_memory_child_whose_probe_reads_no_growth_records_unknown(monkeypatch):
    """VmHWM equal to VmRSS after the reset: nothing was read, not "adds 0 bytes"."""
    monkeypatch.setattr(memory_child, "status_kib", lambda field: 4096)
    child = memory_child.measure_one_call("sdpa", [1, 2, 16, 8, 8], threads=None, seed=0)
    assert child["extra_peak_bytes"] is None


def _zero_probe_child(monkeypatch, seen_env=None):
    """Stands in for the memory subprocess: each child reports a probe that read 0 bytes."""
    real_run = subprocess.run

    def fake_run(cmd, **kwargs):
        if "eval.benchmarks.memory_child" not in " ".join(map(str, cmd)):
            return real_run(cmd, **kwargs)  # git and the rest of provenance
        if seen_env is not None:
            seen_env.append(kwargs["env"])
        args = json.loads(cmd[-1])
        line = {
            "peer": args["peer"],
            "extra_peak_bytes": 0,
            "rss_before_bytes": 1 << 20,
            "output_bytes": 4096,
            "input_bytes": 8192,
            "method": "VmHWM after /proc/self/clear_refs minus VmRSS before",
        }
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(line) + "\n", stderr="")

    monkeypatch.setattr(memory.subprocess, "run", fake_run)


def test_quick_bench_renders_a_memory_probe_that_read_zero_as_unknown(tmp_path, monkeypatch):
    _zero_probe_child(monkeypatch)
    report = speed.run(tmp_path, quick=True, threads=1, parts=("memory",))
    mem = report["memory"]
    assert mem["ratio"] is None and mem["met"] is None
    for peer in mem["peers"].values():
        assert peer["extra_peak_bytes"] == [None]
        assert peer["median_extra_peak_bytes"] is None
    assert json.loads((tmp_path / "bench.json").read_text())["memory"]["ratio"] is None
    md = (tmp_path / "bench.md").read_text()
    assert "OAttention / SDPA extra peak: unknown" in md


def test_a_report_that_cannot_be_rendered_leaves_neither_file(tmp_path, monkeypatch):
    _zero_probe_child(monkeypatch)

    def broken(report):
        raise TypeError("rendering failed")

    monkeypatch.setattr(speed, "render_markdown", broken)
    with pytest.raises(TypeError, match="rendering failed"):
        speed.run(tmp_path, quick=True, threads=1, parts=("memory",))
    assert not (tmp_path / "bench.json").exists() and not (tmp_path / "bench.md").exists()


def test_the_memory_child_finds_the_repository_root_first_on_its_path(tmp_path, monkeypatch):
    """The child's first PYTHONPATH entry held ``eval/`` itself, whose modules shadow packages."""
    envs = []
    _zero_probe_child(monkeypatch, envs)
    memory.bench_memory(Shape(1, 2, 16, 8, 8, "memory"), runs=1)
    first = Path(envs[0]["PYTHONPATH"].split(os.pathsep)[0])
    assert (first / "eval" / "benchmarks" / "memory_child.py").is_file(), first


def test_a_gpu_check_report_that_cannot_be_rendered_leaves_neither_file(tmp_path, monkeypatch):
    from eval import gpu_check

    def broken(report):
        raise TypeError("rendering failed")

    monkeypatch.setattr(gpu_check, "render_markdown", broken)
    out = tmp_path / "gpu"
    argv = [str(out), "--device", "cpu", "--quick", "--parts", "exactness"]
    with pytest.raises(TypeError, match="rendering failed"):
        gpu_check._run(gpu_check._parser().parse_args(argv))
    assert not (out / "gpu_check.json").exists() and not (out / "gpu_check.md").exists()


def test_a_batched_timing_whose_probe_reads_no_growth_records_unknown(monkeypatch):
    """The benchmarks share one timed probe and its rule: a probe that read no growth is unknown."""
    from eval.benchmarks import timing

    monkeypatch.setattr(timing, "status_kib", lambda field: 4096)
    monkeypatch.setattr(timing, "reset_peak_rss", lambda: True)
    seconds, peak = timing.timed_with_peak(lambda: None)
    assert seconds >= 0 and peak is None


# --- exit codes of bench -------------------------------------------------


def test_bench_refuses_an_unknown_model_alias_in_one_line_before_any_work(tmp_path, capsys):
    """``bench --model v4`` exited 0, every host part of its report reading "Not measured"."""
    out = tmp_path / "bench"
    assert main(["bench", "--quick", "--model", "v4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'v4'" in err and "'v3.5'" in err and "'embedded'" in err
    assert not out.exists()  # refused before anything was measured or written


def test_bench_exits_non_zero_when_a_part_it_was_asked_for_was_not_measured(
    tmp_path, capsys, monkeypatch
):
    """A part that could not be measured was written as "Not measured" and bench exited 0."""

    def fails(**_: object) -> dict:
        raise RuntimeError("no host for the loop")

    monkeypatch.setattr(speed, "bench_fit_loop", fails)
    out = tmp_path / "bench"
    assert main(["bench", "--quick", "--parts", "fit_loop", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not measured: fit_loop (RuntimeError: no host for the loop)" in err
    assert "Not measured" in (out / "bench.md").read_text()  # the report still says why
