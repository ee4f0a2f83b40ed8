"""O-closed modules: each keeps the zero carrier a NULL state.

Local maps absorb the null state (``f(0) = 0``) by gating with the token's
own presence; support-coupled maps give a null token zero mass.

Shape letters: B batch, S tokens, E embedding, H heads, D head dimension.
Every ``from_module`` shares the original's parameters (no copies) and keeps
the original modules by reference, so ``state_dict`` and weight updates stay
with the host.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from patches.oattention import oattention, oattention_reference
from patches.presence import check_tau, presence_unchecked

__all__ = [
    "OFFN",
    "OAttention",
    "OInject",
    "ONorm",
    "OStandardize",
    "OTransformerBlock",
    "support_size",
]

SupportKind = Literal["count", "mass"]
# "fast": the fused kernel; "reference": the float64 per-row oracle, bit-exact
# under null insertion, for proofs and small ablations.
AttentionKernel = Literal["fast", "reference"]


def _check_kernel(kernel: str) -> str:
    if kernel not in ("fast", "reference"):
        raise ValueError(f"kernel must be 'fast' or 'reference', got {kernel!r}")
    return kernel


def support_size(
    p_BS: torch.Tensor, kind: SupportKind = "count", weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Effective number of sources per batch element, shape ``(B,)``.

    Args:
        p_BS: Presence of the sources.
        kind: ``"count"``: number of non-null sources (equals ``S`` when none
            is null, so a pretrained length scaling is reproduced exactly);
            ``"mass"``: the sum of presence.
        weights: Optional nonnegative multiplicity ``w`` of each source
            (``(B, S)``): a source counts ``w`` times, so ``"count"`` is
            ``sum w [p > 0]`` and ``"mass"`` is ``sum w p``. None: every source once
            (the same arithmetic as without the argument).

    Returns:
        ``n_eff`` in float32 (float64 for float64 presence).
    """
    if kind == "count":
        if weights is None:
            return (p_BS > 0).sum(dim=-1).to(p_BS.dtype)
        return ((p_BS > 0).to(p_BS.dtype) * weights).sum(dim=-1)
    if kind == "mass":
        return p_BS.sum(dim=-1) if weights is None else (p_BS * weights).sum(dim=-1)
    raise ValueError(f"support must be 'count' or 'mass', got {kind!r}")


def _gate(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``p[..., None] * y`` in ``y``'s dtype, with exact zeros where ``p = 0``."""
    return y * p.unsqueeze(-1).to(y.dtype)


class ONorm(nn.Module):
    """``ONorm(h) = p(h) * Norm(h)``: a norm whose affine bias cannot revive a null."""

    def __init__(self, norm: nn.Module, tau: float = 1.0, *, tau_checked: bool = False) -> None:
        super().__init__()
        self.norm = norm
        # tau_checked: the caller's settings validated tau once already.
        self.tau = float(tau) if tau_checked else check_tau(tau)

    @classmethod
    def from_module(cls, norm: nn.Module, *, tau: float = 1.0, tau_checked: bool = False) -> ONorm:
        """Wraps an existing norm, sharing its parameters.

        ``tau`` is validated unless ``tau_checked`` says the caller did
        (a retrofit's settings are validated once, when resolved).
        """
        return cls(norm, tau=tau, tau_checked=tau_checked)

    def forward(self, h: torch.Tensor, p: torch.Tensor | None = None) -> torch.Tensor:
        """Args: h: carriers ``(..., E)``; p: their presence, computed if None."""
        p = presence_unchecked(h, self.tau) if p is None else p
        return _gate(p, self.norm(h))


class OFFN(nn.Module):
    """``OFFN(h) = h + p(h) * FFN(Norm(h))``: a residual feed-forward update."""

    def __init__(
        self,
        ffn: nn.Module,
        norm: nn.Module | None = None,
        tau: float = 1.0,
        *,
        tau_checked: bool = False,
    ) -> None:
        super().__init__()
        self.ffn = ffn
        self.norm = norm if norm is not None else nn.Identity()
        # tau_checked: the caller's settings validated tau once already.
        self.tau = float(tau) if tau_checked else check_tau(tau)

    @classmethod
    def from_module(
        cls,
        ffn: nn.Module,
        norm: nn.Module | None = None,
        *,
        tau: float = 1.0,
        tau_checked: bool = False,
    ) -> OFFN:
        """Wraps an existing feed-forward network and its pre-norm, sharing weights.

        ``tau`` is validated unless ``tau_checked`` says the caller did
        (a retrofit's settings are validated once, when resolved).
        """
        return cls(ffn, norm, tau=tau, tau_checked=tau_checked)

    def forward(self, h: torch.Tensor, p: torch.Tensor | None = None) -> torch.Tensor:
        """Args: h: carriers ``(..., E)``; p: their presence, computed if None."""
        p = presence_unchecked(h, self.tau) if p is None else p
        return h + _gate(p, self.ffn(self.norm(h)))


class OInject(nn.Module):
    """``OInject(h, c) = h + p(h) * g(c)``: a token-local injection.

    Target, position and column embeddings added to a token leave a null
    token null.
    """

    def __init__(self, embed: nn.Module, tau: float = 1.0) -> None:
        super().__init__()
        self.embed = embed
        self.tau = check_tau(tau)

    @classmethod
    def from_module(cls, embed: nn.Module, *, tau: float = 1.0) -> OInject:
        """Wraps an existing embedding module, sharing its weights."""
        return cls(embed, tau=tau)

    def forward(
        self, h: torch.Tensor, context: torch.Tensor, p: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Adds the gated embedding of ``context`` to carriers ``h`` (presence ``p``)."""
        p = presence_unchecked(h, self.tau) if p is None else p
        return h + _gate(p, self.embed(context))


class OStandardize(nn.Module):
    """Presence-weighted standardisation across tokens.

    ``mu = sum_j p_j h_j / sum_j p_j`` and the presence-weighted variance, per
    feature, over the token axis ``-2``; present tokens are standardised and
    null tokens stay exactly 0. A null token carries no mass, so inserting one
    changes neither statistic. With no present token the output is 0.
    """

    def __init__(self, eps: float = 1e-8) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, h_BSE: torch.Tensor, p_BS: torch.Tensor) -> torch.Tensor:
        """Args: h_BSE: tokens ``(..., S, E)``; p_BS: their presence ``(..., S)``."""
        wide = torch.float64 if h_BSE.dtype == torch.float64 else torch.float32
        h = h_BSE.to(wide)
        w = p_BS.to(wide).unsqueeze(-1)
        mass = w.sum(dim=-2, keepdim=True)
        safe_mass = mass.clamp_min(torch.finfo(wide).tiny)
        mu = (w * h).sum(dim=-2, keepdim=True) / safe_mass
        var = (w * (h - mu).square()).sum(dim=-2, keepdim=True) / safe_mass
        z = (h - mu) / torch.sqrt(var + self.eps)
        return torch.where(w > 0, z, torch.zeros_like(z)).to(h_BSE.dtype)


class OAttention(nn.Module):
    """Multi-head self-attention over carriers with presence gating.

    Queries, keys and values are projected from ``x`` (typically the normed
    input of a pre-norm block) while presence comes from the hidden carrier
    ``h`` (the residual stream): after a norm every non-null token has nearly
    the same norm, so presence of the normed input would be nearly binary.
    The output projection's bias is gated by the receiver's presence, so a
    null receiver's output is exactly 0.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        bias: bool = True,
        tau: float = 1.0,
        eps_den: float = 1e-6,
        kernel: AttentionKernel = "fast",
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.in_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.tau = check_tau(tau)
        self.eps_den = eps_den
        self.kernel = _check_kernel(kernel)

    @classmethod
    def from_module(
        cls,
        mha: nn.MultiheadAttention,
        *,
        tau: float = 1.0,
        eps_den: float = 1e-6,
        kernel: AttentionKernel = "fast",
    ) -> OAttention:
        """Builds OAttention on a ``batch_first`` ``nn.MultiheadAttention``.

        The projection parameters are shared, not copied.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"expected nn.MultiheadAttention, got {type(mha).__name__}")
        if not mha._qkv_same_embed_dim or not mha.batch_first:
            raise ValueError(
                "OAttention.from_module needs batch_first self-attention with one in_proj"
            )
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.embed_dim, new.num_heads = mha.embed_dim, mha.num_heads
        new.in_proj = nn.Linear(mha.embed_dim, 3 * mha.embed_dim, bias=mha.in_proj_bias is not None)
        new.in_proj.weight = mha.in_proj_weight
        if mha.in_proj_bias is not None:
            new.in_proj.bias = mha.in_proj_bias
        new.out_proj = mha.out_proj
        new.tau, new.eps_den = check_tau(tau), eps_den
        new.kernel = _check_kernel(kernel)
        return new

    def forward(
        self,
        x_BSE: torch.Tensor,
        h_BSE: torch.Tensor | None = None,
        *,
        p_BS: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Self-attention of the tokens in ``x_BSE``.

        Args:
            x_BSE: Input to the projections ``(B, S, E)``.
            h_BSE: Hidden carriers presence is read from; ``x_BSE`` if None.
            p_BS: Presence, if already computed (shared across heads and maps).
            mask: Optional boolean mask broadcastable to ``(B, H, S, S)``.

        Returns:
            ``(B, S, E)``.
        """
        if p_BS is None:
            p_BS = presence_unchecked(x_BSE if h_BSE is None else h_BSE, self.tau)
        B, S, E = x_BSE.shape
        H = self.num_heads
        qkv = F.linear(x_BSE, self.in_proj.weight, self.in_proj.bias)
        q, k, v = qkv.view(B, S, 3, H, E // H).unbind(dim=2)
        attend = oattention if self.kernel == "fast" else oattention_reference
        o_BHSD = attend(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            p_BS,
            p_BS,
            mask=mask,
            eps_den=self.eps_den,
        )
        o_BSE = o_BHSD.transpose(1, 2).reshape(B, S, E)
        out = F.linear(o_BSE, self.out_proj.weight)
        if self.out_proj.bias is not None:
            out = out + _gate(p_BS, self.out_proj.bias.expand_as(out))
        return out


class OTransformerBlock(nn.Module):
    """A pre-norm transformer block made O-closed.

    ``mode="full-o"``: ``h1 = h + OAttention(ONorm(h); presence of h)`` and
    ``h2 = OFFN(h1)``, so a null token stays exactly 0 and changes nothing.
    ``mode="oattention"``: only the attention is replaced; norm and FFN are
    the host's, so a null token is revived by the norm's bias and the FFN's
    biases (the ablation's "OA-only" host).
    """

    def __init__(
        self,
        attn: OAttention,
        norm1: nn.Module,
        ffn: nn.Module,
        norm2: nn.Module,
        *,
        mode: Literal["full-o", "oattention"] = "full-o",
        tau: float = 1.0,
    ) -> None:
        super().__init__()
        if mode not in ("full-o", "oattention"):
            raise ValueError(f"mode must be 'full-o' or 'oattention', got {mode!r}")
        self.mode = mode
        self.tau = check_tau(tau)
        self.attn = attn
        self.norm1 = ONorm(norm1, self.tau, tau_checked=True) if mode == "full-o" else norm1
        # Both modes keep the residual: h + FFN(Norm(h)), gated by presence in full-o.
        if mode == "full-o":
            self.ffn = OFFN(ffn, norm2, self.tau, tau_checked=True)
        else:
            self.ffn = _Residual(nn.Sequential(norm2, ffn))

    @classmethod
    def from_module(
        cls,
        layer: nn.TransformerEncoderLayer,
        *,
        mode: Literal["full-o", "oattention"] = "full-o",
        tau: float = 1.0,
        eps_den: float = 1e-6,
        kernel: AttentionKernel = "fast",
    ) -> OTransformerBlock:
        """Builds the block on a pre-norm ``nn.TransformerEncoderLayer``.

        The layer must have ``norm_first=True`` and ``batch_first=True``; all
        weights are shared.
        """
        if not isinstance(layer, nn.TransformerEncoderLayer) or not layer.norm_first:
            raise ValueError("from_module needs an nn.TransformerEncoderLayer with norm_first=True")
        act = layer.activation
        act_module = act if isinstance(act, nn.Module) else _Activation(act)
        ffn = nn.Sequential(layer.linear1, act_module, layer.linear2)
        attn = OAttention.from_module(layer.self_attn, tau=tau, eps_den=eps_den, kernel=kernel)
        return cls(attn, layer.norm1, ffn, layer.norm2, mode=mode, tau=tau)

    def forward(self, h_BSE: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Args: h_BSE: carriers ``(B, S, E)``; mask: optional boolean mask."""
        p_BS = presence_unchecked(h_BSE, self.tau)
        x = self.norm1(h_BSE, p_BS) if self.mode == "full-o" else self.norm1(h_BSE)
        h_BSE = h_BSE + self.attn(x, p_BS=p_BS, mask=mask)
        return self.ffn(h_BSE)


class _Residual(nn.Module):
    """``h + f(h)``: the host's ungated pre-norm feed-forward update."""

    def __init__(self, fn: nn.Module) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """Applies the residual update."""
        return h + self.fn(h)


class _Activation(nn.Module):
    """Wraps a functional activation so it can sit in ``nn.Sequential``."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Applies the activation."""
        return self.fn(x)
