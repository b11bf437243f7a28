"""MoleculeNet's regression and classification sets, in the data cache. ``info`` holds what the recipes read of
each: its SMILES column, its target columns and how many of its rows are known not to parse (skipped with
on_invalid=auto)."""
from __future__ import annotations

from recipe_zoo.core.datasets import DatasetInfo, Download, dataset

_MOLNET = "https://raw.githubusercontent.com/GLambard/Molecules_Dataset_Collection/beb35cd0b76db5adef6cb1fa55807e4cd309aaed/originals/"
_MOL_SPLIT = ("80/10/10 train/validation/test by the run's seed, random (or Bemis-Murcko scaffold: the benchmark "
              "key then ends in :split=scaffold)")
for _name, _file, _sha, _what, _metric, _targets, _known_invalid in (
        ("esol", "ESOL_delaney-processed.csv", "8c06a76f0c6487d29ab0f903e6a7a7139f189ab3c1178f159c8be8964602f189",
         "MoleculeNet ESOL: measured aqueous log solubility of 1,128 molecules", "RMSE (log mol/L)",
         ("measured log solubility in mols per litre",), 0),
        ("lipophilicity", "Lipophilicity.csv", "aed41590cb30609d51d8e08ad3ff06495a76e80e211358801f596b10da69bacd",
         "MoleculeNet Lipophilicity: octanol/water logD at pH 7.4 of 4,200 ChEMBL molecules", "RMSE", ("exp",), 0),
        ("freesolv", "FreeSolv_SAMPL.csv", "ab5895d914ee87cb563bd7b9611e869527bba45bec6b014d34dc495a0f9dcb72",
         "MoleculeNet FreeSolv: hydration free energy of 642 molecules (kcal/mol)", "RMSE (kcal/mol)", ("expt",), 0),
        ("bbbp", "BBBP.csv", "d07a38487aeac5cee5508413e468043ef3097451d2a112701c2d60be9ec6b662",
         "MoleculeNet BBBP: blood-brain barrier penetration, 2,050 rows (11 SMILES do not parse)", "ROC-AUC",
         ("p_np",), 11)):
    dataset(DatasetInfo(name=_name, domain="molecules", source="cache", path=f"molecules/moleculenet/{_file}",
                         description=_what, split=_MOL_SPLIT, metric=_metric,
                         downloads=(Download(_MOLNET + _file, _sha),),
                         info={"smiles": "smiles", "targets": _targets, "known_invalid": _known_invalid}))
