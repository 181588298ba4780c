"""The llm_judge selector against a scripted OpenAI-compatible server: parsing robustly, counting every fallback
(malformed JSON, missing boundaries, out-of-range scores, timeouts, HTTP errors, a server that is down), the
cost reported, and the fork at the judge's top-rated step."""

import json
import time

import pytest
import torch
from scripted_server import JudgeScript, judge_server, n_steps

from bsb.engine.judge import JudgeError, LocalJudge, OpenAIJudge, judge_prompt, parse_scores
from bsb.engine.selectors import ChainInput, SelectorConfig, make_selector

NL = 7
MASK = torch.zeros(64, dtype=torch.bool)
MASK[NL] = True


def decode(ids):
    return " ".join("\n" if i == NL else f"w{i}" for i in ids)


@pytest.fixture
def scripted():
    script = JudgeScript()
    srv = judge_server(script)
    yield script, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _chain():
    resp = [10, 11, NL, 12, 13, NL, 14, 15, NL, 16, 17, 18]
    return ChainInput(prompt=[20, 21], response=resp)


def _selector(url, endpoint="chat", timeout=5.0):
    judge = OpenAIJudge(url, "judge-model", endpoint, key_env="BSB_TEST_JUDGE_KEY", timeout_s=timeout)
    return make_selector("llm_judge", SelectorConfig(judge=judge, decode=decode)), judge


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_the_fork_is_the_judges_top_rated_step(scripted, endpoint, monkeypatch):
    script, url = scripted
    monkeypatch.setenv("BSB_TEST_JUDGE_KEY", "sk-test")
    script.reply = lambda p: (200, "Sure! " + json.dumps({"scores": [2, 9, 4][: n_steps(p)]}) + " done")
    sel, judge = _selector(url, endpoint)
    choice = sel.select([_chain()], MASK).choices[0]
    assert choice.pool.positions == [3, 6, 9] and choice.scores == [2.0, 9.0, 4.0] and choice.fork == 6 and not choice.fallback
    assert choice.token_forwards == 120  # the judge's prompt + completion tokens are the read cost
    path, body, auth = script.requests[0]
    assert path == ("/v1/chat/completions" if endpoint == "chat" else "/v1/completions") and body["model"] == "judge-model"
    assert auth == "Bearer sk-test" and body["temperature"] == 0.0
    prompt = body["messages"][0]["content"] if endpoint == "chat" else body["prompt"]
    assert "[1] w12 w13" in prompt and "[3] w16 w17 w18" in prompt and "w10 w11" in prompt.split("[1]")[0]
    assert judge.stats.calls == 1 and judge.stats.prompt_tokens == 100 and judge.stats.completion_tokens == 20


@pytest.mark.parametrize("reply, reason", [
    ("not json {scores: [1, 2", "unparseable reply"),
    ('{"scores": [5, 6]}', "wrong number of scores"),
    ('{"scores": [5, 60, 1]}', "score out of range"),
    ('{"scores": [5, "high", 1]}', "non-numeric score"),
    ('{"scores": [5, NaN, 1]}', "score out of range"),  # Python's JSON reads NaN: a non-finite score
])
def test_unusable_replies_fall_back_to_midpoint_and_are_counted(scripted, reply, reason):
    script, url = scripted
    script.reply = lambda p: (200, reply)
    sel, judge = _selector(url)
    choice = sel.select([_chain()], MASK).choices[0]
    assert choice.fallback == f"judge: {reason}" and choice.fork == 6  # the midpoint of 12 tokens
    assert judge.stats.failures == {reason: 1}


def test_http_errors_timeouts_and_a_dead_server_are_counted_fallbacks(scripted):
    script, url = scripted
    script.reply = lambda p: (500, "")
    sel, judge = _selector(url)
    assert sel.select([_chain()], MASK).choices[0].fallback == "judge: HTTP 500"
    script.reply, script.delay = (lambda p: (200, '{"scores": [1, 2, 3]}')), 2.0
    sel, judge = _selector(url, timeout=0.5)
    assert sel.select([_chain()], MASK).choices[0].fallback == "judge: timeout"
    dead, judge = _selector("http://127.0.0.1:9")
    assert dead.select([_chain()], MASK).choices[0].fallback == "judge: unreachable"
    assert "unreachable 1" in judge.stats.summary()


def test_parse_scores_finds_the_json_anywhere_and_checks_it():
    assert parse_scores('reasoning...\n```json\n{"scores": [1, 2.5, 10]}\n```', 3) == [1.0, 2.5, 10.0]
    assert parse_scores("[0, 3]", 2) == [0.0, 3.0]
    with pytest.raises(JudgeError, match="out of range"):
        parse_scores('{"scores": [-1, 3]}', 2)


@pytest.mark.parametrize(
    "reply, match",
    [
        ("[true, false]", "non-numeric"),  # found: taken as 1 and 0
        ('{"scores": [1, true]}', "non-numeric"),
        ('["5", 3]', "non-numeric"),  # a string is not a score, even one that reads as a number
        ("[1" + "0" * 400 + ", 3]", "out of range"),  # found: float() of a 400-digit int raised OverflowError
        ("[NaN, 3]", "out of range"),
        ("[1e400, 3]", "out of range"),
        ("[-0.5, 3]", "out of range"),
        ("[10.5, 3]", "out of range"),
        ("[null, 3]", "non-numeric"),
        ("[[1], 3]", "wrong number of scores"),  # the list inside is the one read
    ],
)
def test_a_hostile_score_is_a_judge_error_never_a_number(reply, match):
    with pytest.raises(JudgeError, match=match):
        parse_scores(reply, 2)


def test_the_prompt_template_numbers_the_steps_and_can_be_replaced(tmp_path):
    text = judge_prompt("What is 2+2?", "ctx", ["a", "b"])
    assert "What is 2+2?" in text and "[1] a\n[2] b" in text and "2 steps" in text
    own = tmp_path / "t.txt"
    own.write_text("P={problem} N={n}\n{steps}")
    assert judge_prompt("Q", "", ["x"], own) == "P=Q N=1\n[1] x"


def test_a_local_model_judges_through_a_backend():
    class Backend:
        def generate(self, prompts, max_new_tokens, temperature=1.0, top_p=1.0, seed=0, eos_token_id=None):
            return [[1, 2, 3]]

    class Tok:
        eos_token_id = 0

        def encode(self, text, add_special_tokens=False):
            return list(range(len(text.split())))

        def decode(self, ids, skip_special_tokens=True):
            return '{"scores": [1, 7, 2]}'

    judge = LocalJudge(Backend(), Tok())
    choice = make_selector("llm_judge", SelectorConfig(judge=judge, decode=decode)).select([_chain()], MASK).choices[0]
    assert choice.fork == 6 and choice.scores == [1.0, 7.0, 2.0] and judge.stats.completion_tokens == 3


def test_bad_judge_configuration_is_an_error():
    with pytest.raises(ValueError, match="needs a judge"):
        make_selector("llm_judge", SelectorConfig())
    with pytest.raises(ValueError, match="http"):
        OpenAIJudge("ftp://x", "m")
    with pytest.raises(ValueError, match="endpoint"):
        OpenAIJudge("http://x", "m", endpoint="grpc")


# ------------------------------------------------------------------ a hostile judge server: every reply bounded


def _hostile_cases():
    import itertools

    from hostile_http import response

    good = '{"choices": [{"message": {"content": "[1, 2, 3]"}}], "usage": {"prompt_tokens": 5}}'

    def endless_chunks(server):
        yield b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        for _ in itertools.count():
            yield b"10000\r\n" + b"x" * 0x10000 + b"\r\n"

    def drip(server):  # the headers, then one byte every 0.3 s: each read is quick, the call is not
        body = good.encode()
        yield f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        for b in body:
            yield 0.3
            yield bytes([b])

    return {
        "timeout": drip,
        "reply too large": lambda s: [b"HTTP/1.1 200 OK\r\nContent-Length: 400000000\r\n\r\n{"],
        "reply too large ": endless_chunks,
        "malformed HTTP reply": lambda s: [b"HTTP/1.1 ABC\r\n\r\n"],
        "malformed HTTP reply ": lambda s: [b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * 200 + b"\r\n{}"],
        "malformed HTTP reply  ": lambda s: [b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 100_000 + b"\r\n\r\n{}"],
        "malformed HTTP reply   ": lambda s: [b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"choices\""],
        "malformed usage": lambda s: response(good.replace('{"prompt_tokens": 5}', '{"prompt_tokens": NaN}')),
        "malformed usage ": lambda s: response(good.replace('{"prompt_tokens": 5}', '{"prompt_tokens": 1e400}')),
        "malformed usage  ": lambda s: response(good.replace('{"prompt_tokens": 5}', "[1, 2]")),
        "malformed usage   ": lambda s: response(good.replace("5", "2.5")),
        "malformed JSON": lambda s: response("[" * 100_000 + "]" * 100_000),
        "malformed JSON ": lambda s: response("[1, 2, 3]"),
        "reply without choices": lambda s: response('{"choices": [{"message": {"content": {"x": 1}}}]}'),
        "non-numeric score": lambda s: response(good.replace("[1, 2, 3]", "[true, false, true]")),
        "score out of range": lambda s: response(good.replace("[1, 2, 3]", "[1" + "0" * 400 + ", 2, 3]")),
    }


@pytest.mark.parametrize("reason", list(_hostile_cases()))
def test_a_hostile_reply_is_a_counted_fallback_within_the_deadline(reason):
    from hostile_http import HostileServer

    server = HostileServer(_hostile_cases()[reason])
    try:
        sel, judge = _selector(server.url, timeout=2.0)
        start = time.monotonic()
        choice = sel.select([_chain()], MASK).choices[0]
        took = time.monotonic() - start
    finally:
        server.close()
    assert choice.fallback == f"judge: {reason.strip()}" and choice.fork == 6
    assert judge.stats.failures == {reason.strip(): 1}
    assert took < 4.0  # one deadline (2 s) for the whole call, whatever the server does


def test_a_redirect_is_not_followed_and_the_key_never_leaves_the_configured_origin(monkeypatch):
    from hostile_http import HostileServer, response

    monkeypatch.setenv("BSB_TEST_JUDGE_KEY", "secret-key")
    elsewhere = HostileServer(lambda s: response('{"choices": [{"message": {"content": "[1, 2, 3]"}}]}'))
    redirect = HostileServer(
        lambda s: response("", "302 Found", (f"Location: {elsewhere.url}/v1/chat/completions",))
    )
    try:
        sel, judge = _selector(redirect.url)
        assert sel.select([_chain()], MASK).choices[0].fallback == "judge: redirect"
    finally:
        redirect.close()
        elsewhere.close()
    assert "Bearer secret-key" in redirect.requests[0]
    assert elsewhere.requests == []
