"""How a rollout draws its chains and continuations, in one object: the response cap, the temperature and top-p.

Every rollout kind takes a :class:`Sampling` (the tree rollout of :mod:`bsb.train.rollout`, the two-stage one of
:mod:`bsb.train.two_stage`, the flat one); ``bsb train`` builds it once from its config (whose fields check the values)
into its run plan, verl's tree loop from its request's sampling parameters."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sampling:
    max_tokens: int = 256  # the response cap: tokens after the prompt, a continuation's prefix included
    temperature: float = 1.0
    top_p: float = 1.0

    def kwargs(self, eos_id: int) -> dict:
        """The keyword arguments of a backend's ``generate`` that this sampling sets (the cap is given per request)."""
        return dict(temperature=self.temperature, top_p=self.top_p, eos_token_id=eos_id)
