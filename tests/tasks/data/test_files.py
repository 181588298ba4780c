"""Problem loaders: MATH-, GSM8K- and AIME-style JSONL, Parquet, and clear errors for malformed rows."""

import json

import pytest

from bsb.tasks.data.files import load_problems


def _jsonl(tmp_path, rows, name="set.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return p


def test_plain_styles(tmp_path):
    p = _jsonl(tmp_path, [
        {"problem": "What is 1/2 + 1/2?", "solution": r"We add: $\boxed{1}$.", "unique_id": "math/1"},
        {"problem": "AIME I 2025 #1", "answer": 70, "id": 2025001},
        {"prompt": "Compute 2+2.", "answer": "4"},
        {"question": "Tom has 3 apples...", "final_answer": "He has 3+4=7\n#### 1,007"},
    ])
    got = load_problems(p)
    assert [(q.id, q.answer) for q in got] == [("math/1", "1"), ("2025001", "70"), ("set-2", "4"), ("set-3", "1007")]
    assert got[3].prompt.startswith("Tom")
    assert all(q.meta["convention"] == "boxed" for q in got)


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": ["a", "b"], "answer": ["1", "2"], "id": ["x", "y"]}), tmp_path / "p.parquet")
    assert [(q.id, q.prompt, q.answer) for q in load_problems(tmp_path / "p.parquet")] == [("x", "a", "1"), ("y", "b", "2")]


@pytest.mark.parametrize(
    "rows,match",
    [
        ([{"prompt": "a", "answer": "1"}, "{not json"], r"set.jsonl:2: not a JSON object"),
        ([{"prompt": "a"}], r"line 1: missing field 'answer'"),
        ([{"answer": "1"}], r"line 1: missing field 'prompt' \(or 'problem', 'question'\)"),
        ([{"prompt": "a", "answer": "1", "id": 1}, {"prompt": "b", "answer": "2", "id": 1}], "duplicate id '1'"),
        ([{"prompt": "a", "solution": r"\boxed{3"}], "not closed"),
        (["[1, 2]"], "expected an object"),
        # nulls, mappings and non-text never become the string "None" or a repr
        ([{"prompt": "a", "answer": {"x": 1}}], "field 'answer': expected text, got dict"),
        ([{"prompt": {"x": 1}, "answer": "1"}], "field 'prompt': expected text, got dict"),
        ([{"prompt": "a", "answer": True}], "field 'answer': expected text, got bool"),
        (['{"prompt": "a", "answer": NaN}'], "field 'answer': expected text, got nan"),
        (['{"prompt": "a\\ud800", "answer": "1"}'], "not valid Unicode"),
        ([{"prompt": [{"role": "user", "content": None}], "reward_model": {"ground_truth": "1"}}],
         "field 'prompt.content': expected text, got null"),
        ([{"prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": {"a": 1}}}],
         "field 'reward_model.ground_truth': expected text, got dict"),
        (["[" * 100_000 + "]" * 100_000], "nested too deeply"),
    ],
)
def test_malformed_rows_name_file_line_and_field(tmp_path, rows, match):
    with pytest.raises(ValueError, match=match):
        load_problems(_jsonl(tmp_path, rows))


def test_unknown_type_missing_and_empty(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ValueError, match="unknown problem file type"):
        load_problems(tmp_path / "a.txt")
    with pytest.raises(FileNotFoundError):
        load_problems(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="holds no problems"):
        load_problems(_jsonl(tmp_path, [""], name="empty.jsonl"))


def test_a_line_too_long_or_not_utf8_is_refused_before_parsing(tmp_path, monkeypatch):
    import bsb.tasks.data.files as files

    monkeypatch.setattr(files, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"prompt": "a", "answer": "1"}) + "\n" + json.dumps({"prompt": "b" * 5000, "answer": "2"}) + "\n")
    with pytest.raises(ValueError, match="long.jsonl:2: a line over"):
        load_problems(path)
    path.write_bytes(b'{"prompt": "a", "answer": "1"}\n{"prompt": "\xff", "answer": "2"}\n')
    with pytest.raises(ValueError, match="long.jsonl:2: not UTF-8 text"):
        load_problems(path)
