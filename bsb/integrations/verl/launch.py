"""``python -m bsb.integrations.verl.launch [hydra overrides]``: verl's PPO trainer on ``bsb_tree.yaml``, after
bsb's start-up check. Every bad input (verl missing, the plugin not registered, a selector that cannot read
through a server, K above the servers' logprob limit, a tree that cannot yield M(1+k) leaves, the verl switches the
tree needs) is one error here, before Ray starts a worker. verl's trainer then also logs bsb's fork statistics
(:mod:`bsb.integrations.verl.metrics`). ``--config-name`` / ``--config-path`` pick another
config (on the same defaults)."""

from __future__ import annotations

import os

from bsb.integrations.verl import require_verl

CONFIG_DIR = os.path.join(os.path.dirname(__file__), "config")


def preflight(config) -> None:
    """bsb's checks of a composed config, then verl's own validation (no worker is started)."""
    from omegaconf import OmegaConf

    from bsb.integrations.verl import plugin
    from bsb.integrations.verl.settings import VerlConfigError, check_config

    missing = [name for name, ok in plugin.registered().items() if not ok]
    if missing:
        raise VerlConfigError(f"bsb's verl plugin did not register {', '.join(missing)}")
    check_config(OmegaConf.to_container(config, resolve=True))
    from verl.trainer.main_ppo import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def main() -> None:
    require_verl()
    import hydra

    @hydra.main(config_path=CONFIG_DIR, config_name="bsb_tree", version_base=None)
    def run(config):
        from verl.trainer.main_ppo import run_ppo
        from verl.utils.device import auto_set_device

        from bsb.integrations.verl.metrics import task_runner

        auto_set_device(config)
        preflight(config)
        run_ppo(config, task_runner_class=task_runner())  # verl's runner; its trainer logs bsb's fork statistics

    run()


if __name__ == "__main__":
    main()
