"""What a backend offers the selectors and the trainer, and the checks both backends share.

A backend has ``generate(prompts, max_new_tokens, temperature, top_p, seed, eos_token_id)`` (token ids in and
out) and ``probe_beliefs(prefix, cuts, suffix, read_len, k, seed)`` (the top-k elicited beliefs, Probe-JS).
``token_stats(prompt, response)`` serves the token-level baselines. White-box reads (``reads``, ``model``:
Lens-Shift, BSV) exist only on :class:`bsb.engine.hf_backend.HFBackend`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TokenStats:
    surprisal: torch.Tensor  # (T,) −log π(y_t | y_<t) of each response token
    entropy: torch.Tensor  # (T,) entropy of the next-token distribution at each response token (NaN if unknown)
    margin: torch.Tensor  # (T,) top-1 − top-2 logit before each response token (Δz_t)
    token_forwards: int


def check_generation_args(prompts, max_new_tokens: int, temperature: float, top_p: float) -> None:
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs at least one non-empty prompt")
    if max_new_tokens < 1 or temperature < 0 or not 0 < top_p <= 1:
        raise ValueError("max_new_tokens must be >= 1, temperature >= 0 and top_p in (0, 1]")
