"""molecules from the files chemists keep them in: an SD file (and .sdf.gz) written by RDKit, its targets from its
properties and its record names as ids; delimited text with comment lines and other separators (FreeSolv's
upstream database.txt layout) sniffed or told (sep=, comment=); a file in a format the recipes do not read refused
in one line naming it."""
import csv
import gzip
import json
from pathlib import Path

import pytest

from conftest import bad_input, summary_block, write_file, zoo_in_process
from recipe_zoo.core.errors import ZooError
from recipe_zoo.recipes.molecules.config import MolConfig
from recipe_zoo.recipes.molecules.records import sniff_separator
from recipe_zoo.recipes.molecules.table import read_table

ALCOHOLS = ["C" * n + "O" for n in range(1, 13)] + ["C" * n + "N" for n in range(1, 13)] + \
    ["C" * n + "Cl" for n in range(1, 13)]  # 36 molecules


def logp(smiles: str) -> float:
    from rdkit import Chem
    from rdkit.Chem import Descriptors

    return round(Descriptors.MolLogP(Chem.MolFromSmiles(smiles)), 3)


# an element RDKit does not know: the record does not parse
BROKEN = ("broken\n  hand-made\n\n  1  0  0  0  0  0  0  0  0  0999 V2000\n"
          "    0.0000    0.0000    0.0000 Xx  0\nM  END\n> <logS>\n1.0\n\n$$$$\n")


def write_sdf(path: Path, smiles=ALCOHOLS, broken_at: int | None = None) -> Path:
    """The molecules as an SD file from RDKit's own writer (names mol0.., a logS and a text property), with a
    record RDKit cannot read after the ``broken_at``-th."""
    import io

    from rdkit import Chem

    buffer = io.StringIO()
    writer = Chem.SDWriter(buffer)
    for i, s in enumerate(smiles):
        mol = Chem.MolFromSmiles(s)
        mol.SetProp("_Name", f"mol{i}")
        mol.SetProp("logS", str(logp(s)))
        mol.SetProp("source", "a chemist's export")
        writer.write(mol)
    writer.close()
    text = buffer.getvalue()
    if broken_at is not None:
        records = text.split("$$$$\n")
        text = "$$$$\n".join(records[:broken_at]) + "$$$$\n" + BROKEN + "$$$$\n".join(records[broken_at:])
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["mols.sdf", "mols.sdf.gz"])
def test_an_sd_file_gives_molecules_targets_from_properties_and_record_names(tmp_path, name):
    table = read_table(MolConfig(data=str(write_sdf(tmp_path / name)), target="logS"))
    assert len(table.mols) == len(ALCOHOLS) and table.names == [f"mol{i}" for i in range(len(ALCOHOLS))]
    assert table.targets == ["logS"] and table.y[3, 0] == logp(ALCOHOLS[3]) and table.task == "regression"
    broken = write_sdf(tmp_path / f"broken-{name}", broken_at=2)
    with pytest.raises(ZooError, match=r"broken-mols.sdf(.gz)?: 1 of 37 records do not parse \(record 3 "
                                       r"\('broken'\)\)"):
        read_table(MolConfig(data=str(broken), target="logS"))
    table = read_table(MolConfig(data=str(broken), target="logS", on_invalid="skip"))
    assert table.skipped == 1 and table.skipped_at == "record 3 ('broken')" and "broken" not in table.names
    with pytest.raises(ZooError, match=r"no property 'logP' in its records \(properties: logS, source\); set target="):
        read_table(MolConfig(data=str(broken), target="logP"))


def test_freesolvs_upstream_layout_reads_as_it_is_and_sep_comment_name_others(tmp_path):
    """MobleyLab's database.txt: '#' lines on top, the last of them the header, '; ' between fields, commas inside
    names; a file with '//' comments and '|' separators needs sep= and comment= (or sniffing, for the separator)."""
    lines = ["#Hydration free energy database, 6/11/17.", "#Semicolon-delimited text file with fields:",
             "# compound id; SMILES; iupac name; experimental value (kcal/mol); notes"]
    lines += [f"mobley_{i}; {s}; 1,1-name {i}; {logp(s)}; none  " for i, s in enumerate(ALCOHOLS)]
    path = write_file(tmp_path / "database.txt", "\n".join(lines) + "\n")
    table = read_table(MolConfig(data=str(path), smiles="SMILES", target="experimental value (kcal/mol)"))
    assert len(table.mols) == len(ALCOHOLS) and table.y[5, 0] == logp(ALCOHOLS[5])
    text = write_file(tmp_path / "t.txt", "// made by hand\nsmiles|y\n// a note\n" + "".join(
        f"{s}|{logp(s)}\n" for s in ALCOHOLS) + "C1CC|1\n")
    with pytest.raises(ZooError, match=r"t.txt: 1 SMILES do not parse \(row 40\): row 40 is 'C1CC'"):
        read_table(MolConfig(data=str(text), target="y", comment="//", sep="|"))  # lines counted as the file has them
    assert len(read_table(MolConfig(data=str(text), target="y", comment="//", on_invalid="skip")).mols) == 36
    assert sniff_separator(['a,"b;c",d', "1,2,3"]) == "," and sniff_separator(["a;b", "1;2"]) == ";"
    assert sniff_separator(["a\tb c", "1\t2"]) == "\t" and sniff_separator(["smiles", "CCO"]) == ","


def test_dmpnn_and_fp_xgb_train_on_an_sd_file_and_predict_it_by_record_name(tmp_path, capfd):
    from recipe_zoo.cli import main

    data = write_sdf(tmp_path / "mols.sdf", smiles=ALCOHOLS * 2, broken_at=5)  # twice: enough for three splits
    r = zoo_in_process("run", "molecules/fp-xgb", f"data={data}", "target=logS", "n_estimators=20", "bits=64",
                       "on_invalid=skip", "--out", tmp_path / "runs")
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    assert "1 rows with unparsable molecules skipped (record 6 ('broken'))" in r.stdout
    run_dir = Path(summary_block(r.stdout)["run_dir"])
    test_rows = list(csv.DictReader(open(run_dir / "predictions.csv")))
    assert set(test_rows[0]) >= {"name", "smiles", "logS", "pred_logS"} and test_rows[0]["name"].startswith("mol")
    out = tmp_path / "p.csv"
    capfd.readouterr()
    assert main(["predict", str(run_dir), f"data={data}", "--out", str(out), "--device", "cpu"]) == 0
    assert "1 of 73 records do not parse (record 6 ('broken'))" in capfd.readouterr().err
    rows = list(csv.DictReader(open(out)))
    assert [r["name"] for r in rows[4:7]] == ["mol4", "broken", "mol5"] and rows[5]["pred_logS"] == ""
    assert float(rows[0]["pred_logS"]) == pytest.approx(float(rows[36 + 1]["pred_logS"]), abs=1e-6)  # the same
    r = zoo_in_process("run", "molecules/dmpnn", f"data={data}", "target=logS",
                       "hidden=16", "ffn_hidden=16", "on_invalid=skip", "--budget", "3steps",
                       "--out", tmp_path / "runs")
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    assert json.loads((Path(summary_block(r.stdout)["run_dir"]) / "summary.json").read_text())["status"] == "ok"


def _parquet(path: Path) -> Path:
    import pandas as pd

    pd.DataFrame({"smiles": ALCOHOLS, "y": [logp(s) for s in ALCOHOLS]}).to_parquet(path)
    return path


@pytest.mark.parametrize("name, content, args, needles", [
    ("t.parquet", _parquet, [], ["t.parquet: a parquet file", "the molecules recipes read delimited text"]),
    ("t.xlsx", b"PK\x03\x04\x14\x00\x06\x00", [], ["t.xlsx: a zip archive (an Excel .xlsx is one)", "or SDF"]),
    ("t.csv.bz", gzip.compress(b"smiles,y\nCCO,1\n"), [], ["t.csv.bz: gzip-compressed, and not named"]),
    ("t.sdf", "junk\n> <logS>\n1.0\n\n$$$$\n", [], ["t.sdf: 1 of 1 records do not parse (record 1 ('junk'))"]),
    ("t.sdf", "", [], ["t.sdf: no records"]),
    ("t.csv", "smiles,y\nCCO,1\n", ["sep=ab"], ["sep='ab': one character"]),
], ids=["parquet", "excel", "gzip-not-text", "sdf-unparsable", "sdf-empty", "sep-two-characters"])
def test_files_the_molecules_recipes_cannot_read_are_one_line_exit_2(tmp_path, capfd, name, content, args, needles):
    path = content(tmp_path / name) if callable(content) else write_file(tmp_path / name, content)
    bad_input(capfd, ["molecules/fp-xgb", f"data={path}", "target=logS" if name.endswith(".sdf") else "target=y",
                      "n_estimators=5", "bits=64", *args], tmp_path / "runs", *needles)
