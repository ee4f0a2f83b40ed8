"""Gradients through OAttention on the CPU (tabpfn's ``differentiable_input`` needs them).

``torch.autograd.gradcheck`` in float64 (finite differences against autograd,
its default tolerances) with respect to queries, keys, values and both
presences, shape ``(B, H, L, S, D) = (1, 2, 3, 4, 5)``.
"""

from __future__ import annotations

import torch

from patches.oattention import oattention


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    B, H, L, S, D = 1, 2, 3, 4, 5
    q, k, v = (torch.randn(B, H, n, D, dtype=torch.float64, generator=g) for n in (L, S, S))
    p_q = torch.rand(B, L, dtype=torch.float64, generator=g) * 0.8 + 0.1
    p_k = torch.rand(B, S, dtype=torch.float64, generator=g) * 0.8 + 0.1
    return [t.requires_grad_() for t in (q, k, v, p_q, p_k)]


def test_oattention_gradients_match_finite_differences_for_every_input():
    def f(q, k, v, p_q, p_k):
        return oattention(q, k, v, p_q, p_k, eps_den=1e-3)

    assert torch.autograd.gradcheck(f, tuple(_inputs()))


def test_oattention_gradients_with_fixed_presence_match_finite_differences():
    q, k, v, p_q, p_k = _inputs(1)
    p_q, p_k = p_q.detach(), p_k.detach()

    def f(q, k, v):
        return oattention(q, k, v, p_q, p_k, eps_den=1e-3)

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_a_null_receiver_gets_zero_gradient_to_its_query():
    q, k, v, p_q, p_k = _inputs(2)
    p_q = p_q.detach().clone()
    p_q[0, 1] = 0.0
    oattention(q, k, v, p_q, p_k, eps_den=1e-3).sum().backward()
    assert torch.equal(q.grad[0, :, 1], torch.zeros_like(q.grad[0, :, 1]))
    assert q.grad[0, :, 0].abs().sum() > 0
