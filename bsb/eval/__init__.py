"""bsb.eval: metrics and figures: Monte-Carlo value curves, the reconstruction metric and its DP floor, test-time voting
and branching rules, bootstrap intervals, figures, and the offline commands' shared session (session.py). The
commands themselves are in bsb.commands (docs/ARCHITECTURE.md)."""
