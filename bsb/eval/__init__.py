"""bsb.eval: pre-RL validation against Monte-Carlo value curves, test-time voting and branching, bootstrap
intervals, the probe-overhead report and the figures (see docs/ARCHITECTURE.md)."""
