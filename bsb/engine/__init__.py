"""bsb.engine: where to fork. Backends (HF white-box, vLLM black-box) with declared capabilities, candidate
boundaries, the packed prefix-shared forward, every fork-point selector, BSV and the cost model (see
docs/ARCHITECTURE.md)."""
