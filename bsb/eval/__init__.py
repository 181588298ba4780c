"""bsb.eval: metrics and figures: Monte-Carlo value curves, the reconstruction metric and its DP floor, flip mass, the
lag diagnostic and the fork contrast, test-time voting and branching rules and their modes, bootstrap intervals,
figures, and the offline commands' shared session (session.py). What the commands report is built here too, for the
commands to print and write: the validation summary and its table (validation.py, validation_report.py), the demo's
tables (demo_report.py), the sweep's summary over seeds (sweep_summary.py), and the rows-to-table rendering they share
(table.py). The commands themselves are in bsb.commands (docs/ARCHITECTURE.md)."""
