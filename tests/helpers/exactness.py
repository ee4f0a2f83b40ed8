"""What an exactness test may assert on every CPU and BLAS, stated once.

Bit-identity (``torch.equal``) is asserted only where the code computes each
output row on its own, from bit-identical inputs:

* the float64 reference kernel (:func:`patches.oattention_reference`) given the
  same ``q, k, v``: each receiver row is a loop over exactly its live sources,
  selected before ``exp``, so an inserted null source never enters that row's
  arithmetic;
* a null row's own output: the receiver gate multiplies it by ``p_i = 0``, so it
  is exactly 0 whatever the rest of the computation does;
* the same operations on the same shapes run twice (a test recomputing what a
  module does, ``unpatch`` restoring the host): the same code path, so the same
  bits.

Everywhere else a row is computed inside an operation whose shape changed (a
sequence one row longer, the rows in another order): the projections, norms and
FFNs of a module run as one BLAS call over all ``B * S`` rows, and a fused
attention kernel blocks over the keys. A BLAS chooses its blocking, its
micro-kernel for the tail rows and its FMA contraction from the problem size
and the CPU's vector units (AVX2, AVX-512, AMX, NEON), so a row that lands in
another block is summed in another order. Two orders of an ``n``-term
reduction differ by at most ``2 * gamma_n * sum|terms|``, with
``gamma_n = n * u / (1 - n * u)`` and ``u = eps / 2`` (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., section 3.1): about ``n`` ulps of
the terms' scale. So those tests assert a bound in ulps of the tensor's scale,
``ulps * finfo(dtype).eps * scale``, with ``scale = max(1, max|expected|)``
unless the call names another, and a test stating a count names what it covers.
The counts below were checked against the AVX-512 + AMX code paths and the ones
forced by ``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2`` or
``ATEN_CPU_CAPABILITY=default``; ``.ci/run`` runs the whole suite natively and
again under the AVX2 pair. Controls (unpatched models) follow the same rule:
where a test claims that a control moves by rounding only (a test row, which is
no key, inserted into the unpatched host), it asserts the bound, never 0.
"""

from __future__ import annotations

import torch

# One module or block (OAttention, an O-closed transformer block) whose
# projections run on the whole sequence, under null-token insertion. float32 and
# float64 accumulate in their own precision and the reductions here are over the
# width E = 16 (FFN hidden 32) or at most 16 tokens: first-order worst case ~16
# ulps of the terms. bf16 and fp16 accumulate in float32 and round each stored
# result once, so a re-ordered sum moves a stored value by at most about one ulp
# of the dtype per rounding stage (projection, attention, output projection,
# residual add): 4. Largest deviation measured over five code paths (AVX-512 and
# AMX; MKL and ATen forced to AVX2, separately and together; ATen without SIMD,
# MKL at SSE4.2): fp64 3.2, fp32 2.5, bf16 0.9, fp16 0.7 ulps.
MODULE_ULPS = {torch.float64: 16, torch.float32: 16, torch.bfloat16: 4, torch.float16: 4}

# A whole forward pass of several blocks (the two-block hosts, a tiny TabPFN v3
# of three ICL blocks), ulps of max|carrier|: each block carries the previous
# block's rounding on, scaled by its own gain. float32 and float64: measured
# <= 3.5 ulps on the code paths above (predictions through the KV cache, ATen
# and MKL on AVX2; carriers <= 2.4); 256 leaves two orders of margin and stays
# far below an unpatched host's drift (about 5e-2 relative, 4e5 float32 ulps).
# bf16 and fp16 (the model cast to them, tabpfn's forced precision): the float32
# accumulation keeps each stored value within about one ulp whatever the depth;
# measured <= 0.84 ulps (fp16) and 0.56 (bf16) with ATen on AVX2, 0 on AVX-512.
# The unpatched host's own drift under the same insertion is about 5e-2
# relative: 6 to 8 bf16 ulps, about 55 fp16 ulps, which is all bf16 can resolve.
# The same bound holds a zero-padded ragged batch against each dataset alone
# (test_batched*.py: the projections run over a taller matrix): measured 0
# ulps on AVX-512 and AMX, <= 2.3 (float64) and 2.1 (float32) on AVX2.
MODEL_ULPS = {torch.float64: 256, torch.float32: 256, torch.bfloat16: 4, torch.float16: 4}

# Class probabilities of a zero-padded ragged classifier batch against each
# dataset's predict_proba, in float32 ulps of max(1, max|p|) whatever the
# inference dtype: tabpfn's classifier casts every member's logits to float32
# before its post-processing (temperature, softmax, averaging), so float64
# inference also returns float32 probabilities. float64: the logits agree within
# MODEL_ULPS float64 ulps, far below half a float32 ulp, so their float32 casts
# differ by at most one ulp of the logit and a softmax probability moves by at
# most a few: 16. float32: MODEL_ULPS of the carriers carried through the
# decoder and the softmax; the probabilities' own measured deviation stays far
# below it: 64. Measured on tiny classifiers of every host class (v2, v2.5,
# v2.6, v3, v3.5; five datasets, OAttention and Full-O; v2 over four seeds):
# 0 ulps (float64), <= 1 ulp (float32); the same padding on the unpatched v2
# host moves them by 6.9e4 to 4.1e5 ulps.
CLASSIFIER_PROBA_ULPS = {torch.float64: 16, torch.float32: 64}

# The same probabilities under tabpfn's default inference_precision="auto", both
# sides in "auto", where it runs bf16 autocast (a CPU with hardware bf16, by
# tabpfn's own check), in bf16 ulps of max(1, max|p|): one is 2**-7 = 7.8e-3.
# Both sides round the carriers in bf16, each in its own order: the batch
# attends over a longer, padded sequence and runs the stages before ICL in
# cache-sized row chunks (retrofit/batching/chunks.py), so a carrier may land a
# bf16 rounding away from predict_proba's and a logit moves by about that share
# of its scale. Measured: tiny classifiers of every host class (five datasets,
# 25 % and 60 % padded) <= 1.0e-3 (0.13 ulps) on AVX-512 + AMX and with ATen and
# MKL on AVX2; the embedded v3 classifier (retrofit/models/embedded) on datasets
# of 120 to 3,000 train rows <= 1.25e-2 (1.6 ulps; on its six datasets of 120 to
# 800 rows 1.7e-3 with the chunks left as predict_proba's, so most of it is the
# chunks'). Where "auto" resolves to float32 (a CPU without hardware bf16) the
# float32 bound above applies.
CLASSIFIER_AUTO_PROBA_BF16_ULPS = 4

# The fused attention kernel alone (patches.oattention) with one more key: its
# products with the keys and its sums over them regroup. Measured <= 0.75 ulps
# of max(1, max|v|) on AVX-512 and <= 1.0 with ATen and MKL on AVX2, in fp32,
# bf16, fp16 and fp64, at the shapes the tests use. eval/operators/exactness.py's
# contracts (S = 40) measured up to 6.1 fp32 ulps on AVX2, so it derives its bound
# from the n-term rule above instead (insertion_ulps: S + 1 in fp32 and fp64).
KERNEL_INSERTION_ULPS = 2

# The fused kernel against the float64 reference on the same inputs: the
# kernel's own rounding, measured <= 1.5 ulps of max(1, max|v|) on every path.
KERNEL_VS_REFERENCE_ULPS = 4


# A vote of the classifier decoder's weights (its weights collapsed by train
# label, averaged over ensemble members) against predict_proba at
# softmax_temperature=1 without balancing, float32: not a rounding bound but the
# host's log clamp. The decoder's logits are log(max(o_t, 1e-5) + 3e-5) of the
# class averages o_t, whose sum is the weights' row sum s; the softmax over the
# K classes gives (o_t + a_t) / (s + A), a_t in [3e-5, 4e-5], A = sum a_t,
# against the vote o_t / s: at most A / s <= 4e-5 * K / s apart, for each member
# and so for their average, plus float32 rounding of the sums, the log and the
# softmax (64 ulps). Measured on tiny v3 and v3.5 classifiers, 3 classes, 3
# members: 1.4e-5 (unpatched, the host's weights, s = 1, bound 1.3e-4) and
# 1.8e-5 (patched at tau 4, the normalised weights, s >= 0.79, bound 1.6e-4);
# the raw patched weights' vote misses by 8.5e-2 to 9.8e-2.
def decoder_vote_bound(n_classes: int, row_sum: float) -> float:
    """How far a vote of decoder weights whose rows sum to ``row_sum`` may be from predict_proba."""
    return 4e-5 * n_classes / row_sum + 64 * torch.finfo(torch.float32).eps


def ulp_of(dtype: torch.dtype, scale: float) -> float:
    """One unit in the last place of ``dtype`` at ``scale``: ``eps(dtype) * scale``."""
    return torch.finfo(dtype).eps * scale


def deviation_in_ulps(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    scale: float | None = None,
    dtype: torch.dtype | None = None,
) -> float:
    """``max|actual - expected|`` in ulps of ``dtype`` at ``scale`` (computed in float64).

    Args:
        actual: The tensor under test.
        expected: The tensor it should equal up to rounding (same shape).
        scale: The magnitude the ulps refer to; ``max(1, max|expected|)`` if None.
        dtype: The precision the ulps are of; ``expected.dtype`` if None.

    Returns:
        The largest absolute deviation divided by ``eps(dtype) * scale``.
    """
    if actual.shape != expected.shape:
        raise AssertionError(f"shapes differ: {tuple(actual.shape)} vs {tuple(expected.shape)}")
    dtype = expected.dtype if dtype is None else dtype
    if scale is None:
        scale = max(1.0, expected.double().abs().max().item()) if expected.numel() else 1.0
    if actual.numel() == 0:
        return 0.0
    dev = (actual.double() - expected.double()).abs().max().item()
    return dev / ulp_of(dtype, float(scale))


def assert_within_ulps(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    ulps: float,
    scale: float | None = None,
    dtype: torch.dtype | None = None,
) -> float:
    """Asserts ``max|actual - expected| <= ulps * eps(dtype) * scale``; returns the deviation.

    This is the assertion for outputs that the mathematics leaves unchanged but
    that a BLAS may compute in another summation order (module docstring): a
    bound in ulps of the tensor's scale, never ``torch.equal``.

    Args:
        actual: The tensor under test.
        expected: The tensor it should equal up to rounding (same shape).
        ulps: The allowed deviation in ulps (a count the caller justifies).
        scale: The magnitude the ulps refer to; ``max(1, max|expected|)`` if None.
        dtype: The precision the ulps are of; ``expected.dtype`` if None.

    Returns:
        The measured deviation in ulps.
    """
    measured = deviation_in_ulps(actual, expected, scale=scale, dtype=dtype)
    assert measured <= ulps, f"deviation {measured:.3g} ulps exceeds the bound of {ulps} ulps"
    return measured


def assert_exactly_zero(t: torch.Tensor) -> None:
    """Asserts every element is 0 (a null row's own output, zero by the receiver gate)."""
    assert torch.equal(t, torch.zeros_like(t)), f"not exactly 0: max|t| = {t.abs().max().item()}"
