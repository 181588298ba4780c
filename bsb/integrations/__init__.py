"""Integrations of bsb into other training engines (each optional: bsb imports without them)."""
