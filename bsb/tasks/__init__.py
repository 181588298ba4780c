"""bsb.tasks: what is being learned. The Task protocol (problems, prompt format, probe suffix and read length, the
committed answer, the verifier), the math and arith tasks, the verifier and problem loaders, and the embedded
default model. No model code (see docs/ARCHITECTURE.md)."""
