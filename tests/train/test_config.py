"""TrainConfig's facts live on its fields: the size limits, the resume-safe names and bsb sweep's name sets are read
from them (pinned here to what the hand-written lists held, so a lost fact fails), the generic checks run through
``bsb.fields.check_values``, and ``__post_init__`` keeps the registries and the rules across fields."""

import dataclasses

import pytest

from bsb.train.config import EVAL_FIELDS, RESUME_SAFE, RUN_ONLY, TrainConfig, default_out_dir

SIZE_LIMITS = {"chains": 4096, "siblings": 4096, "gen_prompts": 1_000_000, "prompts_per_step": 1_000_000,
               "val_problems": 1_000_000, "val_samples": 4096, "max_gen_rounds": 1000, "max_refills": 1000,
               "minibatches": 65536, "micro_batch": 65536, "grad_accum_questions": 1_000_000,
               "max_prompt_len": 10_000_000, "max_response_len": 10_000_000, "steps": 1_000_000_000,
               "max_candidates": 65536, "top_k": 1_000_000, "read_len": 65536}


def test_the_size_limits_are_the_fields_own():
    got = {f.name: f.metadata["size_limit"] for f in dataclasses.fields(TrainConfig) if "size_limit" in f.metadata}
    assert got == SIZE_LIMITS
    for name, limit in SIZE_LIMITS.items():
        with pytest.raises(ValueError, match=f"{name} = {limit + 1} \\(at most {limit}\\)"):
            TrainConfig(**{name: limit + 1})


def test_the_name_sets_are_read_from_the_fields():
    assert set(RESUME_SAFE) == {"steps", "progress", "val_every", "save_every", "resume_changes", "out_dir", "keep_last",
                                "keep_best", "report_to", "wandb_project", "gradient_checkpointing", "fsdp_cpu_offload",
                                "dist_timeout_s", "update_packing", "sync_check_every",
                                "micro_batch_tokens", "vllm_cpu_process", "vllm_batch_tokens"}
    assert set(RUN_ONLY) == {"out_dir", "save_every", "progress"} and set(RUN_ONLY) <= set(RESUME_SAFE)
    assert set(EVAL_FIELDS) == {"val_problems", "val_temperature", "val_top_p", "val_samples", "max_response_len",
                                "prompt_format", "prompt_template", "system_prompt", "chat_template_kwargs"}


def test_a_run_folder_keeps_its_name():
    # the hash covers every field but RESUME_SAFE: the same command finds the folder it wrote before
    assert default_out_dir(TrainConfig()) == "runs/walk-probe_js-seed0-76c7015f"
    assert TrainConfig(steps=7, progress=False, keep_last=2).out_dir == TrainConfig().out_dir


@pytest.mark.parametrize("kw,message", [
    (dict(rollout="beam"), "rollout must be one of tree, two_stage, flat, got 'beam'"),
    (dict(homogeneous="x"), "homogeneous must be one of zero_grad_step, skip_step, backward"),
    (dict(backend="tpu"), "backend must be one of auto, vllm, hf"),
    (dict(probe_reader="x"), "probe_reader must be one of auto, engine, policy"),
    (dict(keep_by="x"), "keep_by must be one of accuracy, reward"),
    (dict(early_eos="x"), "early_eos must be one of terminal_dup"),
    (dict(loss_agg="x"), "loss_agg must be one of token-mean"),
    (dict(grpo_std="x"), "grpo_std must be one of population, sample"),
    (dict(lens_readout="width"), "lens_readout must be one of shape, height, depth"),
    (dict(top_p=0.0), r"top_p must be in \(0, 1\], got 0.0"),
    (dict(clip_low=1.0), r"clip_low must be in \[0, 1\), got 1.0"),
    (dict(clip_ratio_c=1.0), "clip_ratio_c must be > 1, got 1.0"),
    (dict(keep_last=-2), "keep_last must be >= -1, got -2"),
    (dict(val_samples=0), "val_samples must be >= 1, got 0"),
    (dict(range_cap=1.5), r"range_cap must be in \(0, 1\], got 1.5"),
    (dict(read_len=0), "read_len must be >= 1, got 0"),
    (dict(margin_window=[5, 2]), r"margin_window must be \[lo, hi\)"),
    (dict(margin_window=["a", "b"]), r"margin_window must be \[lo, hi\)"),
    (dict(gen_prompts=4, prompts_per_step=8), r"gen_prompts \(4\) must be >= prompts_per_step \(8\)"),
    (dict(rollout="two_stage", two_stage_t_max=300), "two_stage needs 1 <= two_stage_t_min"),
    (dict(overlong_buffer=300), r"overlong_buffer must be in \[0, max_response_len\]"),
    (dict(prefix_alpha=2.0), r"prefix_alpha must be in \[0, 1\], got 2.0"),  # found: accepted, failed at the update
    (dict(prefix_beta=-0.5), r"prefix_beta must be in \[0, 1\], got -0.5"),
    (dict(overlong_factor=-1.0), "overlong_factor must be >= 0, got -1.0"),
    (dict(max_refills=-1), "max_refills must be >= 0, got -1"),
])
def test_each_bad_value_is_one_invalid_config_error(kw, message):
    with pytest.raises(ValueError, match="^invalid config: .*" + message) as err:
        TrainConfig(**kw)
    assert err.value.__cause__ is None and "\n" not in str(err.value)


SHARED_WITH_VERL = ["chains", "siblings", "max_refills", "overlong_buffer", "overlong_factor", "grpo_std", "prefix_beta",
                    "prefix_alpha", "clamped_prefix", "zero_cont_token_mass"]


def test_the_tree_and_credit_options_are_one_declaration_with_verls():
    """Found: declared twice, prefix_alpha had no bounds in bsb train and [0, 1] in verl (and other facts differed)."""
    from bsb.integrations.verl.settings import BsbSettings
    from bsb.train.tree_options import CreditOptions, TreeOptions

    assert [f.name for cls in (TreeOptions, CreditOptions) for f in dataclasses.fields(cls)] == SHARED_WITH_VERL
    train = {f.name: f for f in dataclasses.fields(TrainConfig)}
    verl = {f.name: f for f in dataclasses.fields(BsbSettings)}
    for name in SHARED_WITH_VERL:
        assert train[name].metadata == verl[name].metadata, name  # help, choices, bounds, size limit: one fact each
        assert train[name].default == verl[name].default or name == "overlong_buffer", name  # verl's default 0
    for bad in (dict(prefix_alpha=2.0), dict(max_refills=-1), dict(overlong_factor=-1.0), dict(chains=5000)):
        name = next(iter(bad))
        with pytest.raises(ValueError, match=name):
            TrainConfig(**bad)
        assert any(p.startswith(f"bsb.{name}") for p in BsbSettings(**bad).problems()), bad
