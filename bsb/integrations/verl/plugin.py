"""verl's plugin entry point (``[project.entry-points."verl.plugins"]`` in bsb's pyproject): ``import verl`` in any
process, Ray actors included, imports this module, which registers the ``bsb_tree`` / ``bsb_single`` agent loops
and the ``bsb_treerl`` / ``bsb_prefix_credit`` advantage estimators. verl swallows a plugin's import error (it
logs it at debug level), so :func:`registered` lets a launcher check that the registration happened."""

from bsb.integrations.verl import estimators, tree_loop  # noqa: F401  (registers the agent loops on import)

estimators.register()


def registered() -> dict[str, bool]:
    """Whether each of bsb's pieces is in verl's registries."""
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    names = {
        "agent loop bsb_tree": "bsb_tree" in _agent_loop_registry,
        "agent loop bsb_single": "bsb_single" in _agent_loop_registry,
    }
    names.update({f"estimator {n}": n in ADV_ESTIMATOR_REGISTRY for n in estimators.ESTIMATORS})
    return names
