"""The activation model (bsb.engine.activations) against a measured CPU forward of tiny models: the memory a
forward's graph holds (resident memory, in a fresh process) within 20% of the model's figure, at widths the fit never
saw; with gradient checkpointing a layer keeps only its fp32 input."""

import json
import os
import subprocess
import sys

import pytest
import torch

from bsb.engine.activations import layer_bytes_per_token, layers_bytes_per_token, saved_bytes, update_activation_bytes

transformers = pytest.importorskip("transformers")

CONFIGS = {
    "llama": lambda **kw: transformers.LlamaConfig(**kw),
    "qwen3": lambda **kw: transformers.Qwen3Config(**kw),
    "olmo3": lambda **kw: transformers.Olmo3Config(**kw),
    "gemma3_text": lambda **kw: transformers.Gemma3TextConfig(**kw),
}
# widths none of bench/activations.py's settings has
WIDE = dict(vocab_size=128, hidden_size=320, intermediate_size=1000, num_attention_heads=5, num_key_value_heads=5,
            head_dim=48, num_hidden_layers=4, tie_word_embeddings=False, attn_implementation="sdpa", pad_token_id=0)

RSS = """
import json, resource, sys, torch, transformers
torch.set_num_threads(1)
family, tokens = sys.argv[1], int(sys.argv[2])
cfg = transformers.AutoConfig.for_model(family, **json.loads(sys.argv[3]))
torch.manual_seed(0)
model = transformers.AutoModelForCausalLM.from_config(cfg).train()
ids = torch.randint(0, 128, (1, tokens))
with torch.no_grad():
    model.model(ids[:, :8])  # allocator and kernels warm
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
before = rss()
out = model.model(ids).last_hidden_state  # the graph, and what it saved, stay alive through `out`
after = rss()
print(json.dumps({"held": after - before, "output": out.numel() * out.element_size()}))
"""


@pytest.mark.parametrize("family", list(CONFIGS))
def test_a_forwards_resident_memory_is_the_models_figure_within_20_percent(family):
    tokens = 4096
    cfg = CONFIGS[family](**WIDE)
    want = update_activation_bytes(cfg, 1, tokens, checkpointing=False, dtype="float32")
    kw = {k: v for k, v in WIDE.items() if k != "attn_implementation"}
    # every allocation past 16 KB its own mapping, returned at free: resident memory is then what is alive, not what
    # glibc keeps of the forward's freed temporaries
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="16384", MALLOC_TRIM_THRESHOLD_="0")
    proc = subprocess.run([sys.executable, "-c", RSS, family, str(tokens), json.dumps(kw)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    held = got["held"] - got["output"]
    assert want > 100e6 and abs(held - want) <= 0.2 * want, (family, held / 1e6, want / 1e6)


@pytest.mark.parametrize("family", list(CONFIGS))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_per_token_figure_is_what_a_layer_saves_at_unseen_widths(family, dtype):
    """The fitted coefficients generalise: a layer's saved bytes per token (two lengths, one and two layers) at
    widths outside the fit equal the model's figure (the fit is exact up to qk-norm's per-head terms)."""
    def one_layer(n):
        total = []
        for layers in (1, 2):
            torch.manual_seed(0)
            cfg = CONFIGS[family](**{**WIDE, "num_hidden_layers": layers})
            model = transformers.AutoModelForCausalLM.from_config(cfg).train()
            total.append(saved_bytes(model, torch.randint(0, 128, (1, n)), dtype))
        return total[1] - total[0]

    measured = (one_layer(96) - one_layer(48)) / 48
    assert measured == pytest.approx(layer_bytes_per_token(CONFIGS[family](**WIDE), dtype), rel=1e-3)


def test_checkpointing_keeps_each_layers_fp32_input():
    """A checkpointed layer keeps only its input for the backward: 4·d bytes a token (one layer's activations are
    rebuilt at a time, which the model adds once)."""
    def kept(layers):
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(CONFIGS["llama"](**{**WIDE, "num_hidden_layers": layers}))
        model.train().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return saved_bytes(model, torch.randint(0, 128, (1, 64)))

    cfg = CONFIGS["llama"](**WIDE)
    assert kept(3) - kept(2) == 64 * 4 * cfg.hidden_size
    per = layer_bytes_per_token(cfg, "float32")
    assert update_activation_bytes(cfg, 1, 64, checkpointing=True, dtype="float32") == 64 * (4 * 4 * 320 + per)


@pytest.mark.parametrize("family", ["llama", "olmo3"])
def test_padded_rows_keep_a_mask_in_every_layer(family):
    """Two rows, one padded: every layer keeps an fp32 (2, 1, W, W) mask beside its activations (what the update's
    per-path micro-batches are); the model's figure within 20% of the saved bytes measured."""
    cfg = CONFIGS[family](**WIDE)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg).train()
    width = 512
    mask = torch.ones(2, width, dtype=torch.long)
    mask[1, width // 2 :] = 0
    got = saved_bytes(model, torch.randint(1, 128, (2, width)), attention_mask=mask)
    want = update_activation_bytes(cfg, 2, width, checkpointing=False, dtype="float32")
    masks = 4 * 2 * width * width * cfg.num_hidden_layers
    assert want > masks and abs(got - want) <= 0.2 * want, (got / 1e6, want / 1e6)


def test_an_unmeasured_family_has_no_figure():
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=2)
    assert layer_bytes_per_token(cfg) is None and update_activation_bytes(cfg, 1, 10, False) is None


def _hybrid(blocks, **kw):
    fields = dict(vocab_size=128, hidden_size=192, intermediate_size=320, num_attention_heads=3, num_key_value_heads=1,
                  head_dim=40, mamba_num_heads=6, mamba_head_dim=24, ssm_state_size=24, n_groups=3, chunk_size=48,
                  conv_kernel=4, layers_block_type=blocks, tie_word_embeddings=False, use_cache=False,
                  attn_implementation="sdpa", pad_token_id=0)
    return transformers.NemotronHConfig(**{**fields, **kw})


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_hybrid_is_priced_block_by_block_at_unseen_widths(dtype):
    """Nemotron-H at widths bench/activations.py never saw (its Mamba-2 mixers on transformers' PyTorch path, what a
    GPU without mamba-ssm runs): the saved bytes a token of a Mamba, an attention and an MLP block each within 2% of
    the model's figure, and a whole hybrid's update the sum of its blocks; a model with MoE blocks has no figure."""
    blocks = ["linear_attention", "mlp", "full_attention", "linear_attention"]
    per = layers_bytes_per_token(_hybrid(blocks), dtype)

    def measured(kind):
        def saved(n, layers):
            torch.manual_seed(0)
            model = transformers.AutoModelForCausalLM.from_config(_hybrid([kind] * layers)).train()
            return saved_bytes(model, torch.randint(0, 128, (1, n)), dtype)
        return ((saved(192, 2) - saved(192, 1)) - (saved(96, 2) - saved(96, 1))) / 96

    for i, kind in enumerate(blocks[:3]):
        assert measured(kind) == pytest.approx(per[i], rel=0.02), kind
    assert per[0] == per[3] and per[0] > 3 * per[1]  # the scan's repeated B, C and decay matrices dominate
    cfg = _hybrid(blocks)
    assert update_activation_bytes(cfg, 1, 96, False, dtype) == pytest.approx(96 * sum(per))
    assert update_activation_bytes(cfg, 1, 96, True, dtype) == pytest.approx(96 * (4 * 4 * 192 + max(per)))
    assert layers_bytes_per_token(_hybrid(blocks + ["moe"], n_routed_experts=4, num_experts_per_tok=2,
                                          moe_intermediate_size=48)) is None
