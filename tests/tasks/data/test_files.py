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


# ------------------------------------------------------------------ the second hostile round: totals and one error type

from bsb.tasks.data.files import DataFileError  # noqa: E402


def _parquet(path, columns, **kw):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path, **kw)
    return path


def test_a_file_over_the_total_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    import bsb.tasks.data.files as files

    monkeypatch.setattr(files, "MAX_FILE_BYTES", 2000)
    rows = [{"prompt": f"p{i}", "answer": "1" * 50} for i in range(40)]
    jsonl = _jsonl(tmp_path, rows)
    (tmp_path / "big.json").write_text(json.dumps(rows))
    (tmp_path / "big.csv").write_text("prompt,answer\n" + "".join(f"p{i},{'1' * 50}\n" for i in range(40)))
    _parquet(tmp_path / "big.parquet", {"prompt": [f"p{i}" for i in range(400)], "answer": ["1" * 50] * 400},
             compression="zstd")
    for path in (jsonl, tmp_path / "big.json", tmp_path / "big.csv", tmp_path / "big.parquet"):
        with pytest.raises(DataFileError, match=f"{path.name}: .*over the 2,000-byte limit"):
            load_problems(path)


def test_a_compressed_parquet_cell_over_the_cap_is_refused_before_decoding(tmp_path, monkeypatch):
    """Found: a 20 KB parquet file with one 600 MiB cell reached 8.4 GB RSS in `bsb data`."""
    import pyarrow.parquet as pq

    import bsb.tasks.data.files as files

    monkeypatch.setattr(files, "MAX_CELL_BYTES", 1 << 20)
    path = _parquet(tmp_path / "big_cell.parquet", {"prompt": ["x" * (8 << 20)], "answer": ["1"]}, compression="zstd")
    assert path.stat().st_size < 20_000  # a few kB on disk

    def decoded(*a, **k):
        raise AssertionError("the row group was decoded")

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", decoded)
    with pytest.raises(DataFileError, match=r"big_cell.parquet, row 0: column 'prompt' holds over 1,048,576 bytes"):
        load_problems(path)


def test_a_big_parquet_cell_among_many_rows_is_refused_before_it_becomes_python(tmp_path, monkeypatch):
    import bsb.tasks.data.files as files

    monkeypatch.setattr(files, "MAX_CELL_BYTES", 1 << 20)
    prompts = ["small"] * 50
    prompts[37] = "x" * (2 << 20)
    path = _parquet(tmp_path / "cells.parquet", {"prompt": prompts, "answer": [str(i) for i in range(50)]})
    with pytest.raises(DataFileError, match=r"cells.parquet, row 37: column 'prompt' holds over 1,048,576 bytes"):
        load_problems(path)
    # a value repeated through a dictionary counts at its decoded size, in every row
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 4 << 20)
    path = _parquet(tmp_path / "dict.parquet", {"prompt": ["y" * (300 << 10)] * 30, "answer": ["1"] * 30})
    assert path.stat().st_size < 400_000
    with pytest.raises(DataFileError, match=r"dict.parquet: .*over the 4,194,304-byte limit"):
        load_problems(path)


def test_nested_parquet_cells_count_their_text(tmp_path, monkeypatch):
    import bsb.tasks.data.files as files

    monkeypatch.setattr(files, "MAX_CELL_BYTES", 100_000)
    msgs = [[{"role": "user", "content": "q"}]] * 3
    msgs[1] = [{"role": "user", "content": "z" * 60_000}, {"role": "assistant", "content": "z" * 60_000}]
    path = _parquet(tmp_path / "verl.parquet", {"prompt": msgs, "reward_model": [{"ground_truth": "1"}] * 3})
    with pytest.raises(DataFileError, match=r"verl.parquet, row 1: column 'prompt' holds over 100,000 bytes"):
        load_problems(path)
    monkeypatch.setattr(files, "MAX_CELL_BYTES", 1 << 20)
    assert len(load_problems(path)) == 3


def test_a_csv_field_of_200_kb_loads_and_one_over_the_cap_is_a_clear_error(tmp_path, monkeypatch):
    """Found: `bsb data` on a CSV with a 200 KB field raised _csv.Error."""
    import bsb.tasks.data.files as files

    path = tmp_path / "wide.csv"
    path.write_text("prompt,answer\n" + "x" * 200_000 + ",1\n")
    assert load_problems(path)[0].prompt == "x" * 200_000
    monkeypatch.setattr(files, "MAX_CELL_BYTES", 100_000)
    with pytest.raises(DataFileError, match=r"wide.csv, row 0: a cell over 100,000 bytes"):
        load_problems(path)


@pytest.mark.parametrize("name, content, match", [
    ("garbage.parquet", b"PAR1 this is no parquet file PAR1", "garbage.parquet: not a readable Parquet file"),
    ("latin.csv", "prompt,answer\ncaf\xe9,1\n".encode("latin-1"), "latin.csv: not UTF-8 text"),
    ("bad.json", b"[{\"prompt\": ", "bad.json: not a JSON object"),
    ("bad.jsonl", b"{\"prompt\": \n", "bad.jsonl:1: not a JSON object"),
    ("ids.jsonl", b'{"prompt": "a", "answer": "1", "id": [1, 2]}\n', "ids.jsonl, line 1: field 'id': expected text, got list"),
])
def test_every_unreadable_file_is_one_error_type_naming_the_file(tmp_path, name, content, match):
    pytest.importorskip("pyarrow")
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataFileError, match=match):
        load_problems(path)


@pytest.mark.parametrize("row, match", [
    ({"prompt": "a", "answer": "1", "id": {"x": 1}}, "field 'id': expected text, got dict"),
    ({"prompt": "a", "answer": "1", "id": [1]}, "field 'id': expected text, got list"),
    ({"problem": "p", "answer": "1", "subject": "s", "level": 1, "unique_id": ["u"]}, "field 'unique_id': expected text, got list"),
    ({"Problem": "p", "Answer": "1", "ID": {"a": 1}}, "field 'ID': expected text, got dict"),
    ({"prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": "1"}, "extra_info": {"index": [3]}},
     "field 'extra_info.index': expected text, got list"),
    ({"Question": "q", "Correct Answer": "a", "Incorrect Answer 1": "b", "Incorrect Answer 2": "c",
      "Incorrect Answer 3": "d", "Record ID": [1]}, "field 'Record ID': expected text, got list"),
    ({"question": "q", "final_answer": ["1"], "is_multiple_answer": False, "id": {"a": 1}}, "field 'id': expected text, got dict"),
])
def test_list_or_dict_ids_are_row_errors_not_their_repr(tmp_path, row, match):
    """Found: list or dict ids became their repr."""
    with pytest.raises(DataFileError, match=match):
        load_problems(_jsonl(tmp_path, [row]))


def test_a_hub_data_set_cell_over_the_cap_is_refused_before_it_becomes_python(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    import bsb.tasks.data.files as files

    datasets.Dataset.from_dict({"prompt": ["a", "b" * 5000], "answer": ["1", "2"]}).save_to_disk(str(tmp_path / "ds"))
    monkeypatch.setattr(files, "MAX_CELL_BYTES", 1000)
    with pytest.raises(DataFileError, match=r"row 1: column 'prompt' holds over 1,000 bytes"):
        load_problems(f"hf://{tmp_path}/ds")
