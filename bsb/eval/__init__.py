"""bsb.eval — see shared/DESIGN.md for this layer's role."""
