"""ReadStore: each (chain, selector) read kept as it is done, keyed by everything it depends on; curve_row takes a
kept read as it was and keeps the rest, but a read that could not score and read nothing (a judge that did not
answer) is asked again."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

from bsb.commands.validate import NOT_READS, ValidateConfig, read_options
from bsb.engine.selectors import CannotScore
from bsb.eval.read_store import ReadStore, read_key
from bsb.eval.validation import curve_row


def test_reads_round_trip_through_the_file_and_a_torn_last_line_is_dropped(tmp_path):
    path = tmp_path / "reads.jsonl"
    store = ReadStore(path)
    store.add("a", [0.5, math.nan, 1.0], False, 12, 9, 1.25)
    store.add("b", [0.0], True, 0, 0, 0.0)
    store.add("inf", [math.inf], False, 1, 1, 0.1)  # not kept: read again next time
    with path.open("a") as f:
        f.write('{"key": "c", "scores": [0.')  # a run stopped while writing its next read
    again = ReadStore(path)
    assert len(again) == 2 and again.get("c", 1) is None and again.get("inf", 1) is None
    scores, fallback, spent, floor, seconds = again.get("a", 3)
    assert scores[0] == 0.5 and math.isnan(scores[1]) and scores[2] == 1.0
    assert (fallback, spent, floor, seconds) == (False, 12, 9, 1.25) and again.get("b", 1)[1] is True
    assert path.read_text().endswith("}\n")  # the torn line is gone, so the next read starts on a fresh line
    with pytest.raises(ValueError, match=r"reads.jsonl: read a holds 3 scores for 4 boundaries"):
        again.get("a", 4)  # its key names the boundaries: a kept read of another length is not this chain's
    assert ReadStore(None).get("a", 1) is None


GOOD = {"key": "a", "scores": [0.5, None], "fallback": False, "spent": 1, "floor": 1, "seconds": 0.5}


@pytest.mark.parametrize(
    "change",
    [{"scores": ["0.5"]}, {"scores": [True]}, {"scores": [10**400]}, {"scores": "0.5"}, {"fallback": "false"},
     {"fallback": 0}, {"spent": -1}, {"spent": 1.0}, {"floor": 2**70}, {"key": 3}, {"seconds": True},
     {"seconds": -1}, {"seconds": None}],
)  # fmt: skip
def test_a_bad_record_is_an_error_naming_its_line(tmp_path, change):
    path = tmp_path / "reads.jsonl"
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, **change}) + "\n")
    with pytest.raises(ValueError, match=r"reads.jsonl:2: not a read record"):
        ReadStore(path)


@pytest.mark.parametrize(
    "line",
    ['{"key": "a", "scores": [NaN], "fallback": false, "spent": 1, "floor": 1, "seconds": 0}',
     '{"key": "a", "scores": [Infinity], "fallback": false, "spent": 1, "floor": 1, "seconds": 0}',
     '{"key": "a", "scores": [0.5], "fallback": false, "spent": 1, "floor": 1, "seconds": NaN}',
     '{"key": "a", "scores": [0.5], "fallback": false, "spent": 1, "floor": 1, "seconds": 0, "spent": ' + "9" * 5000 + "}",
     '{"key": "a", "scores": [0.5]}', "[1, 2]", "not json"],
)  # fmt: skip
def test_a_line_that_is_not_a_finite_record_is_an_error(tmp_path, line):
    path = tmp_path / "reads.jsonl"
    path.write_text(line + "\n" + line + "\n")
    with pytest.raises(ValueError, match=r"reads.jsonl:1: not a read record"):
        ReadStore(path)


def test_the_key_changes_with_every_input_of_the_read():
    plain = SimpleNamespace()
    chain = ([1, 2], [3, 4, 5], [5], [1, 2])
    base = ({"top_k": 20}, plain, "probe_js", 0, chain)
    keys = {
        read_key(*base),
        read_key({"top_k": 5}, *base[1:]),
        read_key(base[0], plain, "lens_shift", *base[3:]),
        read_key(*base[:3], 1, chain),
        *(read_key(*base[:4], chain[:k] + (other,) + chain[k + 1 :]) for k, other in enumerate(([1, 9], [3, 4, 6], None, [1]))),
    }
    assert len(keys) == 8 and read_key(*base) == read_key(*base)
    u = torch.ones(2, 3)
    fold = [SimpleNamespace(direction=SimpleNamespace(layer=k, u_plus=u * s, u_minus=-u)) for k, s in ((1, 1), (1, 2), (2, 1))]
    bsv = {read_key(base[0], d, "bsv", *base[3:]) for d in fold}
    assert len(bsv) == 3  # another fold's (or a refit's) direction is another read
    half = SimpleNamespace(direction=SimpleNamespace(layer=1, u_plus=u.bfloat16(), u_minus=-u.bfloat16()))
    assert read_key(base[0], half, "bsv", *base[3:]) == read_key(base[0], fold[0], "bsv", *base[3:])  # the same values


def test_every_setting_that_shapes_a_read_is_in_its_key():
    """The settings a kept read is keyed by, pinned: moving one into NOT_READS (or adding a field) is seen here."""
    options = read_options(ValidateConfig(), "torch.float32", "cpu", SimpleNamespace(suffix=[7, 8], read_len=16))
    assert set(options) == {
        "prompt_format", "prompt_template", "system_prompt", "chat_template_kwargs", "max_candidates", "range_cap",
        "probe_suffix", "read_len", "top_k", "lens_readout", "lens_layers", "lens_eps", "margin_window",
        "gap_threshold", "model", "task", "task_options", "device", "dtype", "problems", "stop", "judge_url",
        "judge_model", "judge_endpoint", "judge_key_env", "judge_template", "judge_timeout_s", "bsv_path",
        "temperature", "max_response", "m", "seed", "resolved",
    }  # fmt: skip
    assert options["resolved"] == {"dtype": "torch.float32", "device": "cpu", "suffix": [7, 8], "read_len": 16}
    assert not NOT_READS & set(options)


class _Selector:
    requires = ("reads",)

    def __init__(self, result):
        self.result, self.calls = result, 0

    def score(self, chain, pool, backend, index, seed):
        self.calls += 1
        if self.result is None:
            raise CannotScore("the judge did not answer")
        return list(self.result), 5

    def read_floor(self, chain, pool):
        return 3


def test_curve_row_reads_what_was_not_kept_and_asks_a_selector_that_could_not_score_again(tmp_path):
    problem = SimpleNamespace(id="p#c0", prompt="Compute", answer="2")
    session = SimpleNamespace(problems=[problem], prompts=[[1, 2]], hf=None, decode=lambda ids: "text",
                              answer_ids=lambda text: [4])  # fmt: skip
    store = SimpleNamespace(answers={})
    cuts, v = [2, 4, 6], [0.0, 1.0, 1.0]

    def row(selectors):
        kept = ReadStore(tmp_path / "reads.jsonl")
        return curve_row(session, 0, list(range(8)), cuts, v, selectors, store, b=1, n_mc=2, seed=0, kept=kept,
                         read_options={"top_k": 20})  # fmt: skip

    scored, judge, empty = _Selector([0.1, 0.9, 0.2]), _Selector(None), _Selector([math.nan] * 3)
    first = row({"probe_js": scored, "llm_judge": judge, "lens_shift": empty})
    again = row({"probe_js": scored, "llm_judge": judge, "lens_shift": empty})
    assert (scored.calls, judge.calls, empty.calls) == (1, 2, 1)  # the judge is asked again; a paid empty read is kept
    assert first["scores"] == again["scores"] and first["scores"]["probe_js"] == [0.1, 0.9, 0.2]
    assert again["read_tokens"] == {"probe_js": 5, "llm_judge": 0, "lens_shift": 5}
    assert again["read_floor"] == {"probe_js": 3, "llm_judge": 0, "lens_shift": 3}
    assert again["fallback"] == {"probe_js": False, "llm_judge": True, "lens_shift": True}
    assert set(again["read_seconds"]) == {"probe_js", "llm_judge", "lens_shift"}
    assert len((tmp_path / "reads.jsonl").read_text().splitlines()) == 2
