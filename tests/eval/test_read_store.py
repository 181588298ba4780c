"""ReadStore: each (chain, selector) read kept as it is done, keyed by everything it depends on."""

import math
from types import SimpleNamespace

import pytest
import torch

from bsb.eval.read_store import ReadStore, read_key


def test_reads_round_trip_through_the_file_and_a_torn_last_line_is_dropped(tmp_path):
    path = tmp_path / "reads.jsonl"
    store = ReadStore(path)
    store.add("a", [0.5, math.nan, 1.0], False, 12, 9, 1.25)
    store.add("b", [0.0], True, 0, 0, 0.0)
    with path.open("a") as f:
        f.write('{"key": "c", "scores": [0.')  # a run stopped while writing its next read
    again = ReadStore(path)
    assert len(again) == 2 and again.get("c") is None
    scores, fallback, spent, floor, seconds = again.get("a")
    assert scores[0] == 0.5 and math.isnan(scores[1]) and scores[2] == 1.0
    assert (fallback, spent, floor, seconds) == (False, 12, 9, 1.25) and again.get("b")[1] is True
    assert path.read_text().endswith("}\n")  # the torn line is gone, so the next read starts on a fresh line
    assert ReadStore(None).get("a") is None


@pytest.mark.parametrize(
    "line",
    ['{"key": "a", "scores": ["0.5"], "fallback": false, "spent": 1, "floor": 1, "seconds": 0}',
     '{"key": "a", "scores": [0.5], "fallback": "false", "spent": 1, "floor": 1, "seconds": 0}',
     '{"key": "a", "scores": [0.5], "fallback": false, "spent": -1, "floor": 1, "seconds": 0}',
     '{"key": 3, "scores": [0.5], "fallback": false, "spent": 1, "floor": 1, "seconds": 0}',
     '{"key": "a", "scores": [0.5]}', "[1, 2]", "not json"],
)  # fmt: skip
def test_a_bad_line_is_an_error_naming_it(tmp_path, line):
    path = tmp_path / "reads.jsonl"
    path.write_text(line + "\n" + line + "\n")
    with pytest.raises(ValueError, match=r"reads.jsonl:1: not a read record"):
        ReadStore(path)


def test_the_key_changes_with_every_input_of_the_read():
    plain = SimpleNamespace()
    base = ({"top_k": 20}, plain, "probe_js", 0, [1, 2], [3, 4, 5], [1, 2])
    keys = {
        read_key(*base),
        read_key({"top_k": 5}, *base[1:]),
        read_key(base[0], plain, "lens_shift", *base[3:]),
        read_key(*base[:3], 1, *base[4:]),
        read_key(*base[:4], [1, 9], *base[5:]),
        read_key(*base[:5], [3, 4, 6], base[6]),
        read_key(*base[:6], [1]),
    }
    assert len(keys) == 7 and read_key(*base) == read_key(*base)
    u = torch.ones(2, 3)
    fold = [SimpleNamespace(direction=SimpleNamespace(layer=k, u_plus=u * s, u_minus=-u)) for k, s in ((1, 1), (1, 2), (2, 1))]
    bsv = {read_key(base[0], d, "bsv", *base[3:]) for d in fold}
    assert len(bsv) == 3  # another fold's (or a refit's) direction is another read
