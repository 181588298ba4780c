"""Problem loaders: MATH-, GSM8K- and AIME-style JSONL, Parquet, and clear errors for malformed rows."""

import json
import re

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
        # found: 5,000 nested boxes kept every box's text, ~n² bytes (and 20,000 unclosed ones took minutes)
        ([{"prompt": "a", "solution": "\\boxed{" * 5000 + "1" + "}" * 5000}], r"over 64 \\boxed\{\} answers"),
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


# ------------------------------------------------------------------ the third hostile round: rows, inflation, integers


def _traced_peak(fn):
    """``fn()``'s error and the peak of Python memory (tracemalloc) while it ran."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(DataFileError) as err:
            fn()
        return err.value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name, body", [
    ("one_char.jsonl", b"1\n" * 200_000),
    ("one_char.json", b"[" + b"1," * 199_999 + b"1]"),
    ("one_char.csv", b"prompt\n" + b"a\n" * 200_000),
])
def test_rows_past_the_cap_are_refused_as_they_are_read(tmp_path, monkeypatch, name, body):
    """Found: 200 MB of one-character JSONL rows reached 3-4 GB (OOM-killed): nothing counted rows."""
    import bsb.tasks.data.files as files

    monkeypatch.setattr(files, "MAX_ROWS", 1000, raising=False)
    path = tmp_path / name
    path.write_bytes(body)
    err, peak = _traced_peak(lambda: load_problems(path))
    assert peak < 2_000_000, f"{peak:,} bytes of Python memory for a file refused at 1,000 rows ({err})"
    assert re.search(rf"{name}: at least 1,001 rows, over the 1,000-row limit \(BSB_DATA_MAX_ROWS raises it\)", str(err))


def test_a_jsonl_row_past_the_cap_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    import bsb.tasks.data.files as files

    monkeypatch.setattr(files, "MAX_ROWS", 3, raising=False)
    path = _jsonl(tmp_path, [{"prompt": f"p{i}", "answer": "1"} for i in range(3)] + ["{not json"])
    with pytest.raises(DataFileError, match=r"set.jsonl: at least 4 rows, over the 3-row limit"):
        load_problems(path)


def test_a_parquet_file_of_too_many_rows_is_refused_from_its_footer(tmp_path, monkeypatch):
    """Found: a 287 KB parquet file of 40 million rows reached 3-4 GB (OOM-killed)."""
    pa = pytest.importorskip("pyarrow")
    import numpy as np
    import pyarrow.parquet as pq

    import bsb.tasks.data.files as files

    monkeypatch.setattr(files, "MAX_ROWS", 1000, raising=False)
    column = pa.DictionaryArray.from_arrays(pa.array(np.zeros(100_000, dtype=np.int32)), pa.array(["a"]))
    path = _parquet(tmp_path / "rows.parquet", {"prompt": column, "answer": column}, compression="zstd")
    assert path.stat().st_size < 10_000

    def decoded(*a, **k):
        raise AssertionError("the rows were decoded")

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", decoded)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", decoded)
    with pytest.raises(DataFileError, match=r"rows.parquet: at least 100,000 rows, over the 1,000-row limit"):
        load_problems(path)


def test_parquet_rows_are_decoded_and_checked_a_batch_at_a_time(tmp_path, monkeypatch):
    """A footer that understates its pages (here: not read at all) is caught within a batch of the limit."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    import bsb.tasks.data.arrow_rows as arrow_rows
    import bsb.tasks.data.files as files

    path = _parquet(tmp_path / "wide.parquet", {"prompt": [f"{i:04}" + "x" * 20_000 for i in range(200)],
                                                "answer": ["1"] * 200})
    monkeypatch.setattr(arrow_rows, "_check_footer", lambda *a: None)
    monkeypatch.setattr(arrow_rows, "BATCH_ROWS", 10, raising=False)
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 500_000)
    decoded = []
    for name in ("iter_batches", "read_row_group"):
        real = getattr(pq.ParquetFile, name)

        def spy(self, *a, _real=real, **k):
            out = _real(self, *a, **k)
            if isinstance(out, pa.Table):
                decoded.append(out.num_rows)
                return out
            return (decoded.append(b.num_rows) or b for b in out)

        monkeypatch.setattr(pq.ParquetFile, name, spy)
    with pytest.raises(DataFileError, match=r"wide.parquet: its rows decode to over the 500,000-byte limit"):
        load_problems(path)
    assert sum(decoded) <= 30, f"{sum(decoded)} of 200 rows decoded before the limit was checked"


def _lcb_row(i, tests_json):
    import base64
    import pickle
    import zlib

    packed = base64.b64encode(zlib.compress(pickle.dumps(tests_json), 9)).decode()
    return {"question_id": f"q{i}", "question_content": "Solve it.", "public_test_cases": "[]",
            "private_test_cases": packed, "metadata": "{}", "starter_code": ""}


def test_compressed_hidden_tests_are_counted_as_they_inflate(tmp_path, monkeypatch):
    """Found: a 6.5 MB JSONL file of LiveCodeBench rows whose zlib-compressed tests inflate to 4.8 GB in all reached
    3-4 GB (OOM-killed): each cell was bounded, the file's total was not."""
    import bsb.tasks.data.files as files
    from bsb.tasks.code.problems import load_code_problems

    tests = json.dumps([{"input": "1 " * (128 << 10), "output": "1", "testtype": "stdin"}])  # 256 KiB inflated
    path = _jsonl(tmp_path, [_lcb_row(i, tests) for i in range(20)], name="lcb.jsonl")
    assert path.stat().st_size < 40_000
    monkeypatch.setattr(files, "MAX_INFLATED_BYTES", 1 << 20, raising=False)
    with pytest.raises(DataFileError, match=r"lcb.jsonl, line 4: the answers read so far .* hold over the "
                       r"1,048,576-byte limit \(BSB_DATA_MAX_INFLATED_BYTES raises it\)"):
        load_code_problems(path)
    monkeypatch.setattr(files, "MAX_INFLATED_BYTES", 8 << 20)
    assert len(load_code_problems(path)) == 20
    # by default a file's answers may hold 100x its size (+ 64 MiB): the 6.5 MB bomb stops at ~0.7 GB, not 16 GiB
    monkeypatch.setenv("BSB_DATA_MAX_INFLATION", "10")
    with pytest.raises(DataFileError, match=r"lcb.jsonl, line \d+: the answers read so far .* hold over the "
                       r"[\d,]+-byte limit \(BSB_DATA_MAX_INFLATION raises it\)"):
        monkeypatch.setattr(files, "INFLATION_FLOOR", 1 << 20)
        load_code_problems(path)


def test_the_limits_are_raised_or_lowered_from_the_environment(tmp_path, monkeypatch):
    path = _jsonl(tmp_path, [{"prompt": f"p{i}", "answer": "1"} for i in range(5)])
    monkeypatch.setenv("BSB_DATA_MAX_ROWS", "4")
    with pytest.raises(DataFileError, match=r"at least 5 rows, over the 4-row limit"):
        load_problems(path)
    monkeypatch.setenv("BSB_DATA_MAX_ROWS", "1_000")
    assert len(load_problems(path)) == 5
    monkeypatch.setenv("BSB_DATA_MAX_ROWS", "lots")
    with pytest.raises(ValueError, match=r"BSB_DATA_MAX_ROWS='lots': expected a positive whole number"):
        load_problems(path)


def test_a_hub_data_set_of_too_many_rows_is_refused_before_its_rows_become_python(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    import bsb.tasks.data.files as files

    datasets.Dataset.from_dict({"prompt": ["a"] * 50, "answer": ["1"] * 50}).save_to_disk(str(tmp_path / "ds"))
    monkeypatch.setattr(files, "MAX_ROWS", 10, raising=False)
    with pytest.raises(DataFileError, match=r"at least 50 rows, over the 10-row limit"):
        load_problems(f"hf://{tmp_path}/ds")


BIG = "7" * 5000


@pytest.mark.parametrize("name, body, match", [
    ("int.jsonl", '{"prompt": "a", "answer": ' + BIG + "}\n", r"int.jsonl:1: an integer of 5,000 digits, over "
     r"Python's 4,300-digit limit"),
    ("int.json", '[{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": ' + BIG + "}]",
     r"int.json, row 1: an integer of 5,000 digits"),
    ("aime.jsonl", json.dumps({"ID": "1", "Problem": "p", "Answer": BIG}) + "\n",
     r"aime.jsonl, line 1: field 'answer': an integer of 5,000 digits"),
    ("aime.csv", "ID,Problem,Answer\n1,p," + BIG + "\n", r"aime.csv, row 0: field 'answer': an integer of 5,000 digits"),
    ("sup.jsonl", json.dumps({"ID": "1", "Problem": "p", "Answer": "\u00b2"}) + "\n",
     r"sup.jsonl, line 1: an AIME answer is an integer, got '²'"),
    ("dash.jsonl", json.dumps({"ID": "1", "Problem": "p", "Answer": "--5"}) + "\n",
     r"dash.jsonl, line 1: an AIME answer is an integer"),
])
def test_an_integer_too_long_to_read_is_a_row_error_naming_the_file(tmp_path, name, body, match):
    """Found: a 5,000-digit integer in a field gave Python's int-conversion message without the file's name."""
    path = tmp_path / name
    path.write_text(body)
    with pytest.raises(DataFileError, match=match):
        load_problems(path)


def test_an_integer_too_long_in_hidden_tests_names_the_file_and_row(tmp_path):
    from bsb.tasks.code.problems import load_code_problems

    tests = '[{"input": "1", "output": ' + BIG + ', "testtype": "functional"}]'
    row = {"question_id": "q", "question_content": "s", "public_test_cases": "[]", "private_test_cases": tests,
           "metadata": '{"func_name": "f"}'}
    with pytest.raises(DataFileError, match=r"lcb.jsonl, line 1: .*4300 digits"):
        load_code_problems(_jsonl(tmp_path, [row], name="lcb.jsonl"))


def test_as_text_of_an_integer_too_long_to_write_is_a_row_error():
    from bsb.tasks.data.schemas import RowError, as_text

    with pytest.raises(RowError, match=r"field 'answer': an integer over Python's 4,300 digits"):
        as_text(10**5000, "answer")


@pytest.mark.parametrize("body, match", [
    (' \n[ {"prompt": "a", "answer": "1"} ,\n {"prompt": "b", "answer": "2"} ]\n', None),
    ("[]", "holds no problems"),
    ("{}", "holds a list of objects"),
    ('[{"prompt": "a", "answer": "1"},]', r"not a JSON object \(Expecting value\); at character 32, row 1"),
    ('[{"prompt": "a", "answer": "1"}] x', r"not a JSON object \(extra data at character 33\)"),
    ('[{"prompt": "a", "answer": "1"} {"prompt": "b"}]', r"',' or '\]' expected at character 31, after row 0"),
])
def test_a_json_list_is_read_a_row_at_a_time(tmp_path, body, match):
    path = tmp_path / "list.json"
    path.write_text(body)
    if match is None:
        assert [p.answer for p in load_problems(path)] == ["1", "2"]
    else:
        with pytest.raises(DataFileError, match=match):
            load_problems(path)
