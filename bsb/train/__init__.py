"""bsb.train: the tree RLVR trainer. One step as phases on plain data (phases.py), the loop, checkpoints and sync
around them (trainer.py), configuration, seed streams, rollouts, rewards, advantages and losses (see
docs/ARCHITECTURE.md)."""
