"""Text as the usual exports hold it: JSONL with a text field (text_field=), parquet with a text column, gzipped
text; each record a document that the split keeps whole; records that cannot be read named by line or row."""
import gzip
import json

import pytest

from conftest import bad_input, summary_block, write_file, zoo_in_process
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.llm import text_splits, textfiles

TINY = ["seq_len=32", "micro_batch=4", "eval_bytes=200", "depth=1", "aspect=32", "head_dim=16", "batch_tokens=128",
        "vocab_size=300", "samples=0", "compile=false"]


def jsonl(path, docs, field="text"):
    path.write_text("".join(json.dumps({"id": i, field: d}) + "\n" for i, d in enumerate(docs)))
    return path


def docs(n=40):
    return [f"Document {i}: " + "the king hath spoken, and thou art here. " * (1 + i % 4) for i in range(n)]


def test_jsonl_records_are_documents_named_by_line_and_the_split_keeps_them_whole(tmp_path):
    path = jsonl(tmp_path / "d.jsonl", docs())
    with open(path, "a") as f:
        f.write("\n" + json.dumps({"text": "   "}) + "\n")  # a blank line is skipped, a blank document counted
    logged = []
    found = textfiles.sources(str(path), logged.append)
    assert found.whole and [name for name, _ in found.docs[:2]] == ["d.jsonl:1", "d.jsonl:2"]
    assert logged == [f"{path}: 1 of 41 documents are blank, left out"]
    splits = text_splits.load_text(str(path), 0.1, 0.15)
    assert all("[" not in key for keys in splits.keys.values() for key in keys)
    assert all(splits.keys[p] for p in ("train", "validation", "test"))
    assert splits.how.startswith("documents in reading order, each whole")
    two = jsonl(tmp_path / "two.jsonl", docs(2))  # too few to keep whole on three sides: cut as one text is
    assert "characters in reading order" in text_splits.load_text(str(two), 0.1, 0.15).how


def test_parquet_and_gzipped_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": docs(10), "n": list(range(10))}), tmp_path / "d.parquet")
    found = textfiles.sources(str(tmp_path / "d.parquet"), text_field="body")
    assert len(found.docs) == 10 and found.docs[3][0] == "d.parquet:4"
    with pytest.raises(ZooError, match=r"d.parquet: no column 'text' \(columns: body, n\); set text_field="):
        textfiles.sources(str(tmp_path / "d.parquet"))
    with pytest.raises(ZooError, match=r"d.parquet row 1: column 'n' holds int, not text"):
        textfiles.sources(str(tmp_path / "d.parquet"), text_field="n")
    (tmp_path / "t.txt.gz").write_bytes(gzip.compress("".join(docs(5)).encode()))
    found = textfiles.sources(str(tmp_path / "t.txt.gz"))
    assert [name for name, _ in found.docs] == ["t.txt.gz"]
    assert textfiles.read_text(found.docs[0][1]) == "".join(docs(5))


def test_gpt_trains_on_jsonl(tmp_path):
    path = jsonl(tmp_path / "d.jsonl", docs(60), field="body")
    r = zoo_in_process("run", "llm/gpt", f"data={path}", "text_field=body", *TINY, "--budget", "2steps",
                       "--out", tmp_path / "runs")
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    summary = summary_block(r.stdout)
    assert summary["status"] == "ok" and summary["split"].startswith("documents in reading order, each whole")
    assert summary["benchmark"].endswith(":text_field=body")


@pytest.mark.parametrize("name, content, args, needles", [
    ("d.jsonl", '{"text": "a"}\n{"text": oops}\n', [], ["d.jsonl line 2: not JSON"]),
    ("d.jsonl", '{"body": "a"}\n', [], ["d.jsonl line 1: no field 'text' (has: body); set text_field="]),
    ("d.jsonl", '{"text": 3}\n', [], ["d.jsonl line 1: field 'text' is int, not text"]),
    ("d.jsonl", "\n\n", [], ["d.jsonl: no JSON lines"]),
    ("d.jsonl.gz", b"not gzip", [], ["d.jsonl.gz: cannot read"]),
    ("d.bin", b"PK\x03\x04rest", [], ["d.bin: a zip archive; llm/gpt reads .txt/.md files"]),
    ("d.data", gzip.compress(b"hello"), [], ["d.data: gzip-compressed, and not named .txt.gz"]),
], ids=["bad-json", "missing-field", "not-text", "no-lines", "bad-gzip", "zip", "gzip-unnamed"])
def test_text_files_that_cannot_be_read_are_one_line_exit_2(tmp_path, capfd, name, content, args, needles):
    path = write_file(tmp_path / name, content)
    bad_input(capfd, ["llm/gpt", f"data={path}", *TINY, *args], tmp_path / "runs", *needles)
