"""Logit-lens log-probs on the CPU without materialising the (rows × V) logits.

The unembedding is streamed in column chunks with torch matmuls and an online logsumexp; the target logit is a
row-wise dot product. Peak extra memory is about ``rows × V / 32`` floats instead of the reference's
``rows × V`` logits plus their log-softmax. Same contract as :func:`bsb.kernels.reference.lens_logprobs`.
"""

from __future__ import annotations

import torch

from bsb.kernels import reference as ref
from bsb.kernels.checks import check_lens_inputs, raise_if_lens_nonfinite

# 32 chunks keep the live (rows × chunk) block near 1/32 of the full logits while each matmul stays wide
# enough to run at the BLAS rate; the floor keeps tiny vocabularies in one or two chunks.
N_CHUNKS = 32
MIN_CHUNK = 2048


def lens_logprobs(
    hidden: torch.Tensor,
    norm_weight: torch.Tensor,
    unembed: torch.Tensor,
    targets: torch.Tensor,
    eps: float = 1e-6,
    norm: str = "rms",
    norm_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    check_lens_inputs(hidden, norm_weight, unembed, targets, eps, norm, norm_bias)
    n_layers, p, d = hidden.shape
    v = unembed.shape[0]
    x = ref.apply_final_norm(
        hidden.float().reshape(-1, d), norm_weight.float(), eps, norm, None if norm_bias is None else norm_bias.float()
    )  # (R, d), R = layers * P
    tgt = targets.to(torch.int64).repeat(n_layers)  # (R,) position p's target for every layer
    target_logit = (x * unembed[tgt].float()).sum(-1)  # (R,)
    chunk = max(MIN_CHUNK, -(-v // N_CHUNKS))
    m = torch.full((x.shape[0],), float("-inf"))
    s = torch.zeros(x.shape[0])
    for c in range(0, v, chunk):
        z = x @ unembed[c : c + chunk].float().T  # (R, chunk)
        m_new = torch.maximum(m, z.amax(-1))
        s = s * torch.exp(m - m_new) + z.sub_(m_new[:, None]).exp_().sum(-1)  # in place: one live block
        m = m_new
    out = (target_logit - (m + s.log())).reshape(n_layers, p)
    return raise_if_lens_nonfinite(out, hidden, norm_weight, unembed, norm_bias)
