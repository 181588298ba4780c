"""The vLLM stand-ins are strict: a call that the installed vLLM would reject fails the test that makes it."""

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed (pip install 'belief-shift-branching[cpu]')")

from strict_vllm import StrictLLM  # noqa: E402

GOOD = dict(model="m", enable_prefix_caching=True, block_size=16, max_logprobs=20, seed=0, dtype="auto",
            max_model_len=1024, gpu_memory_utilization=0.5, enable_sleep_mode=True,
            distributed_executor_backend="external_launcher", max_num_batched_tokens=8192)


def test_the_calls_bsb_makes_pass():
    llm = StrictLLM(**GOOD)
    assert llm.sleep(level=2)["level"] == 2
    assert llm.wake_up(tags=["weights"])["tags"] == ["weights"] and llm.wake_up(tags=["kv_cache"])
    got = llm.collective_rpc("reload_weights", kwargs=dict(weights_iterator=iter([])))
    assert got["method"] == "reload_weights"
    llm.reset_prefix_cache()
    assert llm.generate([[1, 2]], None, use_tqdm=False)["prompts"] == [[1, 2]]


@pytest.mark.parametrize("call,match", [
    (lambda: StrictLLM(**GOOD, enable_prefix_cachng=True), "take no argument.*enable_prefix_cachng"),
    (lambda: StrictLLM(**{**GOOD, "model": None}, modle="m"), "modle"),
    (lambda: StrictLLM(**GOOD).sleep(lvl=2), "rejects this call"),
    (lambda: StrictLLM(**GOOD).sleep(level=3), "level"),
    (lambda: StrictLLM(**GOOD).wake_up(tags=["kv"]), "tags"),
    (lambda: StrictLLM(**GOOD).wake_up(tag=["weights"]), "rejects this call"),
    (lambda: StrictLLM(**GOOD).collective_rpc("reload_weights", kwargs=dict(weight_iterator=iter([]))),
     "reload_weights rejects this call"),
    (lambda: StrictLLM(**GOOD).collective_rpc("reload_weigths", kwargs={}), "no method 'reload_weigths'"),
    (lambda: StrictLLM(**GOOD).generate([[1]], None, use_tqmd=False), "rejects this call"),
    (lambda: StrictLLM(**GOOD).reset_prefix_cache(True, True, True), "rejects this call"),
])
def test_a_call_vllm_would_reject_fails(call, match):
    with pytest.raises((TypeError, ValueError, AttributeError), match=match):
        call()
