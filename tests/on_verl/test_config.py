"""bsb_tree.yaml composes on verl 0.9.1's ppo_trainer defaults and passes verl's own validation; the docs' launch
commands compose; every bad input is one clear error at start-up, before Ray starts anything."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bsb.integrations.verl.launch import preflight
from bsb.integrations.verl.settings import VerlConfigError

VERL_DOC = Path(__file__).resolve().parents[2] / "docs" / "verl.md"


def test_the_shipped_config_is_the_papers_recipe_and_passes_verls_validation(compose, overrides):
    config = compose(*overrides)
    preflight(config)
    actor, rollout, algo = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout, config.algorithm
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert (actor.use_kl_loss, actor.entropy_coeff, algo.use_kl_in_reward) == (False, 0, False)
    assert (algo.filter_groups.enable, algo.filter_groups.metric) == (True, "acc")
    assert (actor.optim.lr, actor.optim.weight_decay, actor.grad_clip) == (1e-6, 0.1, 1.0)
    assert (rollout.n, rollout.temperature, rollout.top_p, rollout.agent.default_agent_loop) == (1, 1.0, 1.0, "bsb_tree")
    assert config.trainer.use_v1 and config.bsb.chains == 4 and config.bsb.siblings == 2
    assert actor.clip_ratio_c == 3.0 and config.bsb.grpo_std == "population"  # the dual clip as bsb train's
    assert list(config.trainer.logger) == ["console", "file"]  # a first launch needs no W&B account


def _launch_commands() -> list[list[str]]:
    """The ``python -m bsb.integrations.verl.launch`` commands of docs/verl.md, as argument lists."""
    section = VERL_DOC.read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        text = re.sub(r"\\\n\s*", " ", block)
        for line in text.splitlines():
            if "bsb.integrations.verl.launch" in line:
                args = shlex.split(line.split("#")[0])
                commands.append(args[args.index("bsb.integrations.verl.launch") + 1 :])
    return commands


def test_the_docs_launch_commands_compose_against_verls_config(compose):
    commands = _launch_commands()
    assert len(commands) >= 2  # one node of 8 GPUs, and several nodes
    for args in commands:
        config = compose(*[a for a in args if "=" in a and not a.startswith("-")])
        preflight(config)  # bsb's checks and verl's validate_config
        assert config.actor_rollout_ref.rollout.agent.agent_loop_manager_class.endswith("BsbTreeAgentLoopManager")


@pytest.mark.parametrize("override, match", [
    ("bsb.selector=lens_shift", "hidden states"), ("bsb.selector=entropy", "full next-token distribution"),
    ("bsb.top_k=32", "exceeds the servers' logprob limit 20"), ("bsb.siblings=0", "bsb.siblings must be >= 1, got 0"),
    ("actor_rollout_ref.rollout.n=4", "rollout.n must be 1"), ("trainer.use_v1=false", "use_v1"),
    ("algorithm.adv_estimator=grpo", "adv_estimator"), ("actor_rollout_ref.rollout.agent.agent_loop_manager_class=null", "reward"),
])
def test_bad_input_is_one_error_before_any_worker(compose, overrides, override, match):
    import ray

    with pytest.raises(VerlConfigError, match=match):
        preflight(compose(*overrides, override))
    assert not ray.is_initialized()


def test_the_launcher_stops_at_start_up_with_the_error(overrides, tmp_path):
    # hydra writes its outputs/ folder into the working directory: a scratch one
    proc = subprocess.run([sys.executable, "-m", "bsb.integrations.verl.launch", *overrides, "bsb.selector=lens_shift"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0
    assert "cannot run through verl's servers" in proc.stderr
    assert "Started a local Ray instance" not in proc.stderr + proc.stdout
