"""The public shapes of the models bsb prices before their checkpoints are downloaded: [Fork]'s models (their model
cards and config.json files on the hub) and the companion study's Qwen3-0.6B, one table. A local checkpoint is always
read instead (its weight files and config.json); these serve ``bsb cost`` and the memory plan of a config that names
a hub id. The MLP widths agree with the parameter counts to 0.1% (embeddings, attention and 3·d·f a layer)."""

from __future__ import annotations

from pathlib import Path

_OLMO3_7B = dict(
    model_type="olmo3",
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    hidden_size=4096,
    intermediate_size=11008,
    sliding_window=4096,
)  # the base and the SFT checkpoint share one architecture
_QWEN3 = dict(model_type="qwen3", num_attention_heads=32, num_key_value_heads=8, head_dim=128, num_hidden_layers=36)

# name: (parameters, the config fields that set the memory, FLOP and rollout-state figures)
KNOWN_MODELS: dict[str, tuple[float | None, dict]] = {
    "Qwen3-0.6B": (
        None,  # priced by its shape only (bsb cost --model Qwen3-0.6B)
        dict(
            model_type="qwen3",
            hidden_size=1024,
            intermediate_size=3072,
            num_hidden_layers=28,
            num_attention_heads=16,
            num_key_value_heads=8,
            head_dim=128,
            vocab_size=151936,
            tie_word_embeddings=True,
        ),
    ),
    "Qwen3-4B-Base": (4.02e9, dict(_QWEN3, hidden_size=2560, intermediate_size=9728)),
    "Qwen3-8B-Base": (8.19e9, dict(_QWEN3, hidden_size=4096, intermediate_size=12288)),
    "Olmo-3-7B-Instruct-SFT": (7.30e9, _OLMO3_7B),
    "Olmo-3-1025-7B": (7.30e9, _OLMO3_7B),
    "NVIDIA-Nemotron-Nano-9B-v2-Base": (
        8.89e9,
        dict(
            model_type="nemotron_h",
            hidden_size=4480,
            num_key_value_heads=8,
            head_dim=128,
            mamba_num_heads=128,
            mamba_head_dim=80,
            ssm_state_size=128,
            n_groups=8,
            conv_kernel=4,
            hybrid_override_pattern="M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
        ),
    ),
}
COUNTED = tuple(name for name, (params, _) in KNOWN_MODELS.items() if params is not None)


def known_params(path) -> float | None:
    """The parameter count of the known model named as ``path``'s last part (None: not one, or shape only)."""
    return KNOWN_MODELS.get(Path(path).name, (None, None))[0]


def known_config(path):
    """The transformers config of the known model named as ``path``'s last part (its ``layer_types`` resolved);
    None when it is none of them."""
    from transformers import AutoConfig

    known = KNOWN_MODELS.get(Path(path).name)
    if known is None:
        return None
    fields = dict(known[1])
    return AutoConfig.for_model(fields.pop("model_type"), **fields)
