"""FLOPs of a model as it is: the decoder body and the LM head counted apart, from the model's own config.

The paper's accounting (App. B, :mod:`bsb.engine.cost`) prices a token at 2N FLOPs over all N parameters. On a small,
wide model that misstates every read: Gemma-3-270M keeps 63% of its parameters in the embedding, which is a lookup
(no FLOPs), while its head is a 2·d·V matmul at every position where logits are taken, and a Lens-Shift read takes
them at every read layer. Here:

* body: 2·N_body FLOPs a token (every matrix of the decoder layers; MoE experts at their active share top_k / E),
  plus attention's score and value products, 4·H·d_head FLOPs per query token and attended key (a sliding layer
  attends at most its window); norms, activations and Mamba-2's scan are not matmuls and are left out;
* head: 2·d·V FLOPs at each position whose logits are computed (the embedding is free, tied or not).

A Probe-JS read of one cut at prefix length t forwards E + L − 1 tokens (the suffix, then the L − 1 sampled reads)
and takes logits at L positions; a Lens-Shift read forwards E + n − 1 tokens (the suffix and the answer but its last
token) and applies the head to n positions at every read layer. These counts are what torch's ``FlopCounterMode``
counts for the same forwards (``tests/engine/test_model_flops.py``, within 1%).
"""

from __future__ import annotations

from dataclasses import dataclass

from bsb.engine.known_models import KNOWN_MODELS, known_config
from bsb.engine.probe import read_tokens


@dataclass(frozen=True)
class ModelFlops:
    """Matmul FLOPs of one decoder model (:func:`model_flops` builds it from a config)."""

    name: str
    body_params: float  # matmul weights of the decoder layers a token uses (MoE experts at their active share)
    embed_params: int  # V·d: a lookup, no FLOPs
    hidden: int  # d
    vocab: int  # V
    layers: int
    attention: tuple[tuple[int, int | None], ...]  # per attention layer: (H·d_head of the queries, window or None)
    tied: bool = True  # the head shares the embedding's weights (then N counts them once)

    @property
    def head_per_position(self) -> float:
        """2·d·V: the LM head at one position."""
        return 2.0 * self.hidden * self.vocab

    def attention_per_token(self, context: float) -> float:
        """Score and value products of one query token attending ``context`` keys, over every attention layer."""
        return sum(
            4.0 * dims * (context if window is None else min(context, window)) for dims, window in self.attention
        )

    def body(self, tokens: float, context: float) -> float:
        """FLOPs of ``tokens`` query tokens through the body, each attending ``context`` keys (prefix and itself)."""
        return tokens * (2.0 * self.body_params + self.attention_per_token(context))

    def probe_read(self, prefix: float, suffix_len: int, read_len: int) -> float:
        """One Probe-JS read at a cut ``prefix`` tokens into the sequence (prompt included), from the cut's cached
        keys and values: E + L − 1 tokens through the body, the head at L positions."""
        q = read_tokens(suffix_len, read_len)
        return self.body(q, prefix + q) + read_len * self.head_per_position

    def lens_read(self, prefix: float, suffix_len: int, answer_len: int, read_layers: int) -> float:
        """One Lens-Shift read at a cut: E + n − 1 tokens through the body, the head at n positions of every read
        layer (the lens is the final norm and the head on each layer's residual stream)."""
        q = read_tokens(suffix_len, answer_len)
        return self.body(q, prefix + q) + read_layers * answer_len * self.head_per_position

    def token(self, context: float) -> float:
        """One generated token at ``context``: the body and the head at its position."""
        return self.body(1, context) + self.head_per_position

    def two_n(self) -> float:
        """The paper's price of a token, 2N over every parameter (embedding included, the head once if tied)."""
        return 2.0 * (self.body_params + self.embed_params) + (0.0 if self.tied else self.head_per_position)


def model_flops(config, name: str = "") -> ModelFlops:
    """The :class:`ModelFlops` of a transformers config: the model is built on the meta device (no memory, no
    weights) and its parameters are sorted into embedding, head, norms (1-D) and the body's matrices."""
    import torch
    import transformers

    from bsb.engine.families import layer_kinds

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    embed = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    tied = head is embed
    active = _expert_share(config)
    body = 0.0
    for pname, p in model.named_parameters():
        if p is embed or p is head or p.dim() < 2:
            continue
        body += p.numel() * (active if ".experts." in f".{pname}." or pname.endswith("experts") else 1.0)
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    window = getattr(config, "sliding_window", None)
    kinds = layer_kinds(config)
    attention = tuple(
        (heads * head_dim, window if k == "sliding_attention" else None)
        for k in kinds
        if k in ("full_attention", "sliding_attention")
    )
    return ModelFlops(
        name=name or getattr(config, "model_type", "model"),
        body_params=body,
        embed_params=embed.numel(),
        hidden=embed.shape[1],
        vocab=head.shape[0],
        layers=config.num_hidden_layers,
        attention=attention,
        tied=tied,
    )


def _expert_share(config) -> float:
    """The share of a MoE layer's experts one token runs (top-k of E); 1 for a dense model."""
    experts = getattr(config, "num_experts", None) or getattr(config, "n_routed_experts", None)
    top_k = getattr(config, "num_experts_per_tok", None)
    return top_k / experts if experts and top_k else 1.0


def shape_config(name: str):
    """The config of a known model by name (:data:`bsb.engine.known_models.KNOWN_MODELS`)."""
    config = known_config(name)
    if config is None:
        raise ValueError(f"no known model {name!r}; known: {', '.join(KNOWN_MODELS)}")
    return config


def step_flops(m: ModelFlops, s, prompt_len: float, answer_len: int = 2) -> dict:
    """A step of shape ``s`` (:class:`~bsb.engine.cost.StepShape`) priced by ``m``: rollout (every generated token at
    the mean context), training (forward + backward, 3 forwards a trained token), and the reads of Probe-JS and of
    Lens-Shift over every layer with an ``answer_len``-token answer (each cut at the mean prefix, prompt included)."""
    context = prompt_len + s.mean_chain_len / 2
    generated = s.prompts * s.chains * s.mean_chain_len * (1 + s.siblings * (1 - s.cut))
    cuts = s.prompts * s.chains * s.candidates
    out = {
        "rollout": generated * m.token(context),
        "train": 3 * s.train_tokens * m.token(context),
        "probe_js": cuts * m.probe_read(context, s.suffix_len, s.read_len),
        "lens_shift": cuts * m.lens_read(context, s.suffix_len, answer_len, m.layers),
    }
    for read in ("probe_js", "lens_shift"):
        out[f"{read}_share"] = out[read] / (out["rollout"] + out["train"] + out[read])
    return out
