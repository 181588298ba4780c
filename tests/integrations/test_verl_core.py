"""The verl-free core of bsb's verl plugin: the probe clients against a scripted OpenAI server, the server backend that
runs bsb's own tree rollout over async calls, the tree advantages on verl-shaped tensors, the start-up checks.
(verl itself is exercised in tests/verl, in verl's own environment.)"""

import asyncio
import importlib.util
import json
import random
import re
import threading

import pytest
import torch
from scripted_server import EOS, NL, VOCAB, ScriptedGenerate, ScriptedServer, topk

from bsb.engine.backend import BackendError
from bsb.engine.selectors import SelectorConfig, make_selector
from bsb.integrations.verl.estimators import decode_uid, encode_uid, tree_advantages
from bsb.integrations.verl.probe_client import CompletionsProbe, ProbeError, PromptLogprobsProbe, parse_completion
from bsb.integrations.verl.server_backend import ServerBackend
from bsb.integrations.verl.settings import SERVER_SELECTORS, BsbSettings, VerlConfigError, check_config
from bsb.train.advantages import advantages
from bsb.train.config import TrainConfig
from bsb.train.rollout import tree_rollout
from bsb.train.sampling import Sampling
from bsb.train.tree import Leaf, PromptTree
from bsb.train.tree_options import CreditOptions, TreeOptions

MASK = torch.zeros(VOCAB, dtype=torch.bool)
MASK[NL] = True


@pytest.fixture(scope="module")
def server():
    s = ScriptedServer(cached=3)
    yield s
    s.close()


@pytest.fixture
def loop():
    """An event loop running in a background thread (as verl's agent-loop worker runs one)."""
    lp = asyncio.new_event_loop()
    t = threading.Thread(target=lp.run_forever, daemon=True)
    t.start()
    yield lp
    lp.call_soon_threadsafe(lp.stop)
    t.join(5)


def run(coro):
    return asyncio.run(coro)


def _with_probe(probe, coro_fn):
    async def go():
        try:
            return await coro_fn()
        finally:
            if isinstance(probe, CompletionsProbe):
                await probe.close()

    return run(go())


# ---------------------------------------------------------------------------------------------- probe clients


def test_completions_probe_reads_the_scripted_top_k_at_every_cut(server):
    probe = CompletionsProbe(timeout_s=10)
    prefix, cuts, suffix = list(range(10, 40)), [4, 11, 25], [50, 51]
    logp, idx, spent = _with_probe(probe, lambda: probe.read(server.url, prefix, cuts, suffix, 1, 5, seed=3))
    assert logp.shape == idx.shape == (3, 1, 5)
    for c, t in enumerate(cuts):
        want_lp, want_ids = topk(prefix[:t] + suffix, 5)
        assert idx[c, 0].tolist() == want_ids
        torch.testing.assert_close(logp[c, 0], torch.tensor(want_lp))
    assert spent == sum(t + 2 - min(3, t + 2) + 1 for t in cuts)  # cached prompt tokens are not counted
    body = server.requests[-1]
    assert body["temperature"] == 1.0 and body["top_p"] == 1.0 and body["return_tokens_as_token_ids"] is True
    assert body["max_tokens"] == body["min_tokens"] == 1 and body["ignore_eos"] is True and body["model"] == "scripted"


def test_completions_probe_reads_l_positions(server):
    probe = CompletionsProbe(timeout_s=10, model="m")
    logp, idx, _ = _with_probe(probe, lambda: probe.read(server.url, list(range(10, 30)), [6], [50], 3, 4, seed=0))
    assert logp.shape == (1, 3, 4)
    seq = list(range(10, 16)) + [50]
    for pos in range(3):  # the scripted server follows its own greedy read token
        lps, ids = topk(seq, 4)
        assert idx[0, pos].tolist() == ids
        seq.append(ids[0])


@pytest.mark.parametrize("mode, match", [("http_error", "HTTP 500"), ("no_logprobs", "without logprobs"),
                                         ("text_keys", "not a token id")])
def test_completions_probe_failures_are_clear_errors(mode, match):
    bad = ScriptedServer(mode)
    try:
        probe = CompletionsProbe(timeout_s=10, model="m")
        with pytest.raises(ProbeError, match=match):
            _with_probe(probe, lambda: probe.read(bad.url, list(range(10, 30)), [5, 9], [50], 1, 3, seed=0))
    finally:
        bad.close()


def test_completions_probe_unreachable_and_timeouts():
    probe = CompletionsProbe(timeout_s=5, model="m")
    with pytest.raises(ProbeError, match="ClientConnectorError|Cannot connect|refused"):
        _with_probe(probe, lambda: probe.read("http://127.0.0.1:9", [3, 4, 5], [2], [6], 1, 2, seed=0))
    slow = ScriptedServer("slow")
    try:
        probe = CompletionsProbe(timeout_s=0.5, model="m")
        with pytest.raises(ProbeError, match="Timeout"):
            _with_probe(probe, lambda: probe.read(slow.url, [3, 4, 5], [2], [6], 1, 2, seed=0))
    finally:
        slow.close()


def test_parse_completion_keeps_the_k_best_when_the_sampled_token_is_added():
    reply = {"choices": [{"logprobs": {"top_logprobs": [{"token_id:5": -0.5, "token_id:3": -0.5, "token_id:9": -3.0}]}}]}
    logp, ids, cached = parse_completion(reply, 1, 2)
    assert ids == [[3, 5]] and logp == [[-0.5, -0.5]] and cached == 0  # ties: the lower id first
    with pytest.raises(ProbeError, match="3 log-probs where 4"):
        parse_completion(reply, 1, 4)


@pytest.mark.parametrize("read_len", [1, 3])
def test_prompt_logprobs_fallback_reads_the_same_beliefs_and_warns(read_len, caplog):
    gen = ScriptedGenerate(extra=True)
    prefix, cuts, suffix = list(range(10, 40)), [5, 17], [50, 51]
    PromptLogprobsProbe.warned = False
    with caplog.at_level("WARNING"):
        logp, idx, spent = run(PromptLogprobsProbe().read(gen, prefix, cuts, suffix, read_len, 4, seed=2))
    assert "no prefix cache" in caplog.text
    assert logp.shape == (2, read_len, 4)
    for c, t in enumerate(cuts):
        context = prefix[:t] + suffix
        reads = [p for p, params in gen.calls if "prompt_logprobs" in params and p[: len(context)] == context][0][len(context):]
        for pos in range(read_len):
            lps, ids = topk(context + reads[:pos], 4)
            assert idx[c, pos].tolist() == ids
            torch.testing.assert_close(logp[c, pos], torch.tensor(lps))
    assert spent == sum(t + 2 + read_len for t in cuts)  # no cache: the whole context every time


# ---------------------------------------------------------------------------------------------- server backend


def _tree(loop, selector="probe_js", short=0, chains=4, siblings=2, logprobs=False):
    gen = ScriptedGenerate(short=short)
    server = ScriptedServer()
    probe = CompletionsProbe(timeout_s=10, model="m")

    async def read(prefix, cuts, suffix, read_len, k, seed):
        return await probe.read(server.url, prefix, cuts, suffix, read_len, k, seed)

    backend = ServerBackend(loop, gen, read, 20, {"logprobs": logprobs})
    sel = make_selector(selector, SelectorConfig(suffix=[50, 51], top_k=5))
    try:
        trees, times = tree_rollout([[3, 4, 5, 6]], ["p"], ["gold"], backend, sel.bound_to(backend), MASK,
                                    TreeOptions(chains, siblings, max_refills=2), Sampling(64), EOS, seed=11)
    finally:
        asyncio.run_coroutine_threadsafe(probe.close(), loop).result(5)
        server.close()
    return trees[0], times, gen, backend


def test_bsb_tree_rollout_runs_unchanged_over_the_server_backend(loop):
    tree, times, gen, _ = _tree(loop)
    assert len(tree.leaves) == 4 * (1 + 2)
    groups = tree.groups()
    assert sorted(groups) == [0, 1, 2, 3] and all(len(v) == 3 for v in groups.values())
    for idx in groups.values():
        root, *sibs = [tree.leaves[i] for i in idx]
        assert root.origin == "root" and all(s.origin == "sibling" for s in sibs)
        t = root.prefix_len
        assert t > 0 and all(s.prefix_len == t and s.response[:t] == root.response[:t] for s in sibs)
    # siblings were asked for from prompt + the root's prefix, with the root's remaining budget
    sib_calls = [(p, params) for p, params in gen.calls if len(p) > 4]
    # one batched call: each sibling asks for its own root's remaining budget (max_response - its cut)
    assert len(sib_calls) == 8 and all(params["max_tokens"] == 64 - (len(p) - 4) for p, params in sib_calls)
    assert all(len(leaf.response) <= 64 for leaf in tree.leaves)
    assert all(params["stop_token_ids"] == [EOS] and params["temperature"] == 1.0 for _, params in gen.calls)
    assert tree.probe_tokens > 0 and times.select_s > 0


def test_the_fork_is_the_probe_js_argmax_of_the_scripted_beliefs(loop):
    tree, _, _, backend = _tree(loop)
    sel = make_selector("probe_js", SelectorConfig(suffix=[50, 51], top_k=5))
    for g, idx in tree.groups().items():
        root = tree.leaves[idx[0]]
        pool = sel.pool(type("C", (), {"response": root.response, "budget_left": None})(), MASK)
        beliefs = [topk([3, 4, 5, 6] + root.response[:t] + [50, 51], 5) for t in pool.positions]
        from bsb.kernels import reference

        lp = torch.tensor([b[0] for b in beliefs])[:, None, :]
        ix = torch.tensor([b[1] for b in beliefs])[:, None, :]
        js = reference.probe_js_topk(lp, ix, torch.zeros(len(beliefs), dtype=torch.long)).tolist()
        best = max(range(len(js)), key=lambda j: (js[j], -j))
        assert tree.fork_positions[g] == pool.positions[best]


def test_unforkable_roots_are_refilled_and_the_tree_still_has_m_times_1_plus_k_leaves(loop):
    tree, _, _, _ = _tree(loop, short=2)  # the first two roots are 1-token chains
    assert tree.refills == 2 and len(tree.leaves) == 12
    assert all(f is not None for f in tree.fork_positions)


@pytest.mark.parametrize("selector", ["midpoint", "newline", "uniform", "random"])
def test_every_server_selector_builds_a_tree(loop, selector):
    tree, _, _, _ = _tree(loop, selector=selector, chains=2, siblings=1)
    assert len(tree.leaves) == 4 and tree.probe_tokens == 0


@pytest.mark.parametrize("selector", ["lens_shift", "entropy", "min_margin"])
def test_selectors_that_need_more_than_top_k_are_refused_by_the_backend(loop, selector):
    backend = ServerBackend(loop, ScriptedGenerate())
    with pytest.raises(BackendError, match="does not provide"):
        make_selector(selector, SelectorConfig(suffix=[50]), backend)


def test_sibling_rollout_logprobs_are_the_roots_prefix_joined_to_their_own(loop):
    tree, _, _, backend = _tree(loop, logprobs=True)
    for idx in tree.groups().values():
        root, sib = tree.leaves[idx[0]], tree.leaves[idx[1]]
        t = sib.prefix_len
        lp_root = backend.leaf_logprobs([3, 4, 5, 6], root.response, root.response, t)
        lp_sib = backend.leaf_logprobs([3, 4, 5, 6], root.response, sib.response, t)
        assert len(lp_root) == len(root.response) and len(lp_sib) == len(sib.response)
        assert lp_sib[:t] == lp_root[:t]
        assert lp_sib[t:] == [-0.01 * (i + 1) for i in range(len(sib.response) - t)]


def test_the_backend_checks_k_and_refuses_to_block_its_own_loop(loop):
    backend = ServerBackend(loop, ScriptedGenerate(), read=lambda *a: None, max_logprobs=20)
    with pytest.raises(ValueError, match="logprob limit"):
        backend.probe_topk([([1, 2, 3], [1])], [5], 1, 21)

    async def inside():
        return backend.generate([[1, 2]], 4)

    with pytest.raises(RuntimeError, match="worker thread"):
        asyncio.run_coroutine_threadsafe(inside(), loop).result(5)


# ---------------------------------------------------------------------------------------------- estimators


def _random_tree(rng: random.Random, uid: str) -> PromptTree:
    tree = PromptTree(uid, None)
    for g in range(rng.randint(1, 4)):
        root_len = rng.randint(3, 12)
        t = rng.choice([0, rng.randint(1, root_len - 2)])
        for j in range(rng.randint(1, 3)):
            n = root_len if j == 0 else t + rng.randint(1, 8)
            tree.leaves.append(Leaf([], [0] * n, g, t, reward=rng.choice([0.0, 1.0, -0.5, 0.75])))
    return tree


@pytest.mark.parametrize("kind, opts", [("treerl", {}), ("prefix_credit", {}),
                                        ("prefix_credit", dict(prefix_beta=0.25, prefix_alpha=0.3)),
                                        ("prefix_credit", dict(prefix_beta=0.25, clamped_prefix=True)),
                                        ("prefix_credit", dict(grpo_std="sample")), ("treerl", dict(zero_cont_token_mass=True))])
def test_tree_advantages_on_verl_rows_equal_bsbs_own(kind, opts):
    rng = random.Random(7)
    trees = [_random_tree(rng, f"u{i}") for i in range(6)]
    rows = [(tree, i) for tree in trees for i in range(len(tree.leaves))]
    rng.shuffle(rows)  # verl's batch interleaves prompts
    T = max(len(tr.leaves[i].response) for tr, i in rows) + 3  # right padding
    rewards, mask, index = torch.zeros(len(rows), T), torch.zeros(len(rows), T, dtype=torch.long), []
    for r, (tree, i) in enumerate(rows):
        leaf = tree.leaves[i]
        n = len(leaf.response)
        mask[r, :n] = 1
        rewards[r, n - 1] = leaf.reward  # verl puts the outcome reward on the last response token
        index.append(encode_uid(tree.prompt_id, leaf.group, leaf.prefix_len))
    adv, ret = tree_advantages(rewards, mask, index, kind, CreditOptions(**opts))
    want = {tree.prompt_id: advantages(tree, kind, options=TrainConfig(advantage=kind, **opts)) for tree in trees}  # bsb train's path
    for r, (tree, i) in enumerate(rows):
        n = len(tree.leaves[i].response)
        torch.testing.assert_close(adv[r, :n], want[tree.prompt_id][i], rtol=0, atol=1e-6)
        assert (adv[r, n:] == 0).all()
    assert torch.equal(adv, ret)


def test_uids_that_carry_no_tree_are_a_clear_error():
    assert decode_uid(encode_uid("ab12", 3, 17)) == ("ab12", 3, 17)
    with pytest.raises(ValueError, match="carries no bsb tree"):
        tree_advantages(torch.zeros(1, 3), torch.ones(1, 3), ["plain-uid"], "treerl")
    with pytest.raises(ValueError, match="longer than its"):
        tree_advantages(torch.zeros(1, 3), torch.ones(1, 3), [encode_uid("u", 0, 5)], "treerl")


# ---------------------------------------------------------------------------------------------- start-up checks


GOOD = {"bsb": {"task": "arith"}, "algorithm": {"adv_estimator": "bsb_treerl"}, "trainer": {"use_v1": True},
        "actor_rollout_ref": {"rollout": {"n": 1, "response_length": 64, "agent": {
            "default_agent_loop": "bsb_tree", "agent_loop_manager_class": "bsb.integrations.verl.worker.BsbTreeAgentLoopManager"}}}}


def _with(**bsb):
    import copy

    cfg = copy.deepcopy(GOOD)
    cfg["bsb"].update(bsb)
    return cfg


def test_a_good_config_passes_and_every_server_selector_is_accepted():
    # derived from the selectors' traits and ServerBackend's capabilities; pinned here, so a lost one fails
    assert set(SERVER_SELECTORS) == {"probe_js", "midpoint", "newline", "uniform", "random"}
    for name in SERVER_SELECTORS:
        assert check_config(_with(selector=name)).selector == name


@pytest.mark.parametrize("bsb, match", [
    (dict(selector="lens_shift"), "hidden states"), (dict(selector="entropy"), "full next-token distribution"),
    (dict(selector="bsv"), "hidden states"), (dict(top_k=21), "exceeds the servers' logprob limit 20"),
    (dict(siblings=0), "bsb.siblings must be >= 1, got 0"), (dict(chains=0), "bsb.chains must be >= 1, got 0"),
    (dict(probe_endpoint="grpc"), "probe_endpoint"), (dict(task="nope"), "bsb.task='nope'"),
    (dict(colour="red"), "unknown option"),
    (dict(selector="nope"), "bsb.selector: unknown selector 'nope'"), (dict(max_candidates=1), "must be >= 2 for probe_js"),
    (dict(lens_readout="depth"), "bsb.lens_readout has no effect through verl"),
    (dict(margin_window=[2, 8]), "bsb.margin_window has no effect through verl"), (dict(probe_suffix=""), "non-empty"),
])
def test_bad_bsb_settings_are_one_clear_error(bsb, match):
    with pytest.raises(VerlConfigError, match=match):
        check_config(_with(**bsb))


def test_midpoint_forks_with_one_candidate_on_verl_too():
    assert check_config(_with(selector="midpoint", max_candidates=1)).max_candidates == 1


def test_k_above_20_passes_when_the_servers_allow_it_and_every_problem_is_listed():
    cfg = _with(top_k=32)
    cfg["actor_rollout_ref"]["rollout"]["engine_kwargs"] = {"vllm": {"max_logprobs": 32}}
    assert check_config(cfg).top_k == 32
    cfg = _with(selector="lens_shift", siblings=0)
    cfg["actor_rollout_ref"]["rollout"]["n"] = 8
    cfg["trainer"]["use_v1"] = False
    cfg["algorithm"]["adv_estimator"] = "grpo"
    with pytest.raises(VerlConfigError) as err:
        check_config(cfg)
    for what in ("hidden states", "bsb.siblings must be >= 1", "rollout.n must be 1", "use_v1", "adv_estimator"):
        assert what in str(err.value)


def test_settings_defaults_are_the_papers():
    s = BsbSettings()
    assert (s.chains, s.siblings, s.max_candidates, s.top_k, s.range_cap, s.selector) == (4, 2, 16, 20, 1.0, "probe_js")


@pytest.mark.skipif(importlib.util.find_spec("verl") is not None, reason="verl is installed here")
def test_bsb_imports_without_verl_and_the_launcher_names_the_install():
    import bsb.integrations.verl.estimators  # noqa: F401
    from bsb.integrations.verl import launch

    with pytest.raises(ImportError, match="Scale out"):
        launch.main()
    with pytest.raises(ImportError):
        import bsb.integrations.verl.tree_loop  # noqa: F401


# ------------------------------------------------------------------ a hostile probe server: a ProbeError, never a belief


def _completion(top: dict) -> str:
    return json.dumps({"choices": [{"logprobs": {"top_logprobs": [top]}}]})


def _probe_cases():
    import itertools

    from hostile_http import response

    def endless_chunks(server):
        yield b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        for _ in itertools.count():
            yield b"10000\r\n" + b"x" * 0x10000 + b"\r\n"

    good = {"token_id:5": -0.1, "token_id:6": -2.0}
    return {
        "NaN": lambda s: response(_completion({"token_id:5": float("nan"), "token_id:6": -2.0})),
        "positive": lambda s: response(_completion({"token_id:5": 0.5, "token_id:6": -2.0})),
        "+inf": lambda s: response(_completion(good).replace("-0.1", "Infinity")),
        "string log-prob": lambda s: response(_completion({"token_id:5": "-0.1", "token_id:6": -2.0})),
        "bad token key": lambda s: response(_completion({"token_id:x": -0.1, "token_id:6": -2.0})),
        "list of positions": lambda s: response(json.dumps({"choices": [{"logprobs": {"top_logprobs": [[1, 2]]}}]})),
        "not an object": lambda s: response("[1, 2]"),
        "deep JSON": lambda s: response("[" * 100_000 + "]" * 100_000),
        "cut short": lambda s: [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"choices\""],
        "bad status line": lambda s: [b"HTTP/1.1 ABC\r\n\r\n"],
        "long header": lambda s: [b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 100_000 + b"\r\n\r\n{}"],
        "endless body": endless_chunks,
        "400-digit log-prob": lambda s: response(_completion(good).replace("-0.1", "-1" + "0" * 400)),
        "bool log-prob": lambda s: response(_completion(good).replace("-0.1", "false")),
        "negative cached count": lambda s: response(json.dumps({**json.loads(_completion(good)),
                                                            "usage": {"prompt_tokens_details": {"cached_tokens": -4}}})),
    }


_probe_reasons = {
    "NaN": "nan for token 5: not a log-probability",
    "positive": "0.5 for token 5: not a log-probability",
    "+inf": "inf for token 5: not a log-probability",
    "string log-prob": "'-0.1' as a log-prob",
    "bad token key": "'token_id:x' is not a token id",
    "list of positions": "no 1 read positions",
    "not an object": "not a JSON object",
    "deep JSON": "not JSON",
    "cut short": "ClientPayloadError|not JSON",
    "bad status line": "Bad status line",
    "long header": "Got more than",
    "endless body": "a reply over 8388608 bytes",
    "400-digit log-prob": "a 401-digit integer as a log-prob",
    "bool log-prob": "False as a log-prob",
    "negative cached count": "reports -4 cached tokens",
}


def _one_read(url: str):
    """One probe read (a chain of 4 tokens, one cut, K = 2) from the server at ``url``."""

    async def go():
        probe = CompletionsProbe(timeout_s=5, model="m")
        try:
            return await probe.read(url, [1, 2, 3, 4], [2], [7], 1, 2, 0)
        finally:
            await probe.close()

    return asyncio.run(go())


@pytest.mark.parametrize("case", list(_probe_cases()))
def test_a_hostile_probe_reply_is_a_probe_error(case):
    from hostile_http import HostileServer

    server = HostileServer(_probe_cases()[case])
    try:
        with pytest.raises(ProbeError) as err:
            _one_read(server.url)
    finally:
        server.close()
    assert re.search(_probe_reasons[case], str(err.value)), str(err.value)[:300]


def test_a_redirect_is_not_followed_by_the_probe():
    from hostile_http import HostileServer, response

    elsewhere = HostileServer(lambda s: response(_completion({"token_id:5": -0.1, "token_id:6": -2.0})))
    redirect = HostileServer(lambda s: response("", "307 Temporary Redirect", (f"Location: {elsewhere.url}/v1/completions",)))
    try:
        with pytest.raises(ProbeError, match="HTTP 307"):
            _one_read(redirect.url)
    finally:
        redirect.close()
        elsewhere.close()
    assert elsewhere.requests == []


@pytest.mark.parametrize("key", ["token_id:²", "token_id:٣", "token_id:99999999999999999999999", "token_id:", "id:5", 5])
def test_a_hostile_token_id_key_is_a_probe_error(key):
    """``"²".isdigit()`` is true and int() refuses it; an id past int64 overflowed the tensor later (issue 37)."""
    from bsb.integrations.verl.probe_client import _token_id

    with pytest.raises(ProbeError, match="not a token id"):
        _token_id(key)


@pytest.mark.parametrize("value", [2**63, -1, 1.5, "7", True])
def test_a_hostile_token_id_in_prompt_logprobs_is_a_probe_error(value):
    from bsb.integrations.verl.probe_client import _id

    with pytest.raises(ProbeError, match="as a token id"):
        _id(value)


def test_a_response_length_without_room_for_a_fork_is_an_error():
    """The same check bsb train makes of max_response_len (bsb.train.rollout.fork_room_problem), named verl's way."""
    from bsb.engine.boundaries import MIN_FORK_TOKENS

    cfg = _with()
    cfg["actor_rollout_ref"]["rollout"]["response_length"] = MIN_FORK_TOKENS
    assert check_config(cfg).selector == "probe_js"
    cfg["actor_rollout_ref"]["rollout"]["response_length"] = MIN_FORK_TOKENS - 1
    with pytest.raises(VerlConfigError, match=f"actor_rollout_ref.rollout.response_length={MIN_FORK_TOKENS - 1}: a fork"):
        check_config(cfg)
