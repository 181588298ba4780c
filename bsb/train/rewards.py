"""Leaf rewards: the task's verdict (its reward includes task rules such as [TwoStage]'s derivation gate) plus DAPO's
soft overlong penalty.

Soft overlong penalty (DAPO): with the response cap ``L_max`` and a buffer ``L_buf``, a response of ``n``
tokens loses ``factor · min(n − (L_max − L_buf), L_buf) / L_buf`` when ``n > L_max − L_buf`` (nothing otherwise),
so a response that runs into the cap pays ``factor`` and one ending inside the buffer pays in proportion.
"""

from __future__ import annotations

from dataclasses import dataclass

from bsb.tasks.base import Verdict


@dataclass(frozen=True)
class RewardConfig:
    max_response: int  # L_max, the response token cap
    overlong_buffer: int = 0  # L_buf; 0 turns the penalty off
    overlong_factor: float = 1.0

    def __post_init__(self):
        if not 0 <= self.overlong_buffer <= self.max_response:
            raise ValueError(
                f"overlong_buffer must be in [0, max_response={self.max_response}], got {self.overlong_buffer}"
            )
        if self.overlong_factor < 0:
            raise ValueError(f"overlong_factor must be >= 0, got {self.overlong_factor}")


def overlong_penalty(n_tokens: int, cfg: RewardConfig) -> float:
    if cfg.overlong_buffer == 0:
        return 0.0
    excess = n_tokens - (cfg.max_response - cfg.overlong_buffer)
    return -cfg.overlong_factor * min(excess, cfg.overlong_buffer) / cfg.overlong_buffer if excess > 0 else 0.0


def leaf_reward(verdict: Verdict, n_tokens: int, cfg: RewardConfig) -> float:
    """The verifier's reward plus the overlong penalty of an ``n_tokens`` response."""
    return verdict.reward + overlong_penalty(n_tokens, cfg)
