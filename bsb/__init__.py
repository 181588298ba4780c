"""bsb: belief-shift branching for tree-structured RL with verifiable rewards.

Layers (nothing imports upward): ``bsb.tasks`` and ``bsb.kernels`` → ``bsb.engine`` → ``bsb.train``,
``bsb.eval`` → ``bsb.cli``.
"""

__version__ = "0.1.0"
