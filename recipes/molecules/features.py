"""What the models see of a molecule: atom and bond features (the D-MPNN's graphs), RDKit's 2-D descriptors and
Morgan fingerprints. ``feature_cache.py`` keeps them on disk per set of molecules; ``FEATURE_VERSION`` names the
features a trained run's card records.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch


ELEMENTS = list(range(1, 101))  # atomic numbers, one-hot, plus "other"
DEGREES = [0, 1, 2, 3, 4, 5]
CHARGES = [-2, -1, 0, 1, 2]
HYDROGENS = [0, 1, 2, 3, 4]
FEATURE_VERSION = "3"  # bump when features change: invalidates the feature cache and trained runs' cards


def _one_hot(value, choices) -> list[float]:
    out = [0.0] * (len(choices) + 1)
    out[choices.index(value) if value in choices else len(choices)] = 1.0
    return out


@functools.cache
def _enums():
    from rdkit import Chem

    chiral = [Chem.ChiralType.CHI_UNSPECIFIED, Chem.ChiralType.CHI_TETRAHEDRAL_CW,
              Chem.ChiralType.CHI_TETRAHEDRAL_CCW, Chem.ChiralType.CHI_OTHER]
    hybrid = [Chem.HybridizationType.SP, Chem.HybridizationType.SP2, Chem.HybridizationType.SP3,
              Chem.HybridizationType.SP3D, Chem.HybridizationType.SP3D2]
    bonds = [Chem.BondType.SINGLE, Chem.BondType.DOUBLE, Chem.BondType.TRIPLE, Chem.BondType.AROMATIC]
    stereo = [Chem.BondStereo.STEREONONE, Chem.BondStereo.STEREOANY, Chem.BondStereo.STEREOZ,
              Chem.BondStereo.STEREOE, Chem.BondStereo.STEREOCIS, Chem.BondStereo.STEREOTRANS]
    return chiral, hybrid, bonds, stereo


def atom_features(atom) -> list[float]:
    """Element, degree, formal charge, chirality, H count, hybridisation, aromaticity, ring, mass/100."""
    chiral, hybrid, _, _ = _enums()
    return (_one_hot(atom.GetAtomicNum(), ELEMENTS) + _one_hot(atom.GetTotalDegree(), DEGREES)
            + _one_hot(atom.GetFormalCharge(), CHARGES) + _one_hot(atom.GetChiralTag(), chiral)
            + _one_hot(atom.GetTotalNumHs(), HYDROGENS) + _one_hot(atom.GetHybridization(), hybrid)
            + [float(atom.GetIsAromatic()), float(atom.IsInRing()), atom.GetMass() / 100])


def bond_features(bond) -> list[float]:
    """Bond type, conjugation, ring membership, stereo."""
    _, _, bonds, stereo = _enums()
    return (_one_hot(bond.GetBondType(), bonds) + [float(bond.GetIsConjugated()), float(bond.IsInRing())]
            + _one_hot(bond.GetStereo(), stereo))


@dataclass
class Graphs:
    """All molecules of a table as one disjoint graph: atoms, directed bonds, and per-molecule offsets."""
    x: torch.Tensor  # (atoms, atom features)
    edge_attr: torch.Tensor  # (directed bonds, bond features)
    src: torch.Tensor  # directed bond k goes src[k] -> dst[k]; rev[k] is the opposite direction
    dst: torch.Tensor
    atom_ptr: torch.Tensor  # molecule i owns atoms atom_ptr[i]:atom_ptr[i+1]
    edge_ptr: torch.Tensor  # ... and directed bonds edge_ptr[i]:edge_ptr[i+1]


def featurize(mols: list) -> Graphs:
    xs, es, src, dst, atom_ptr, edge_ptr = [], [], [], [], [0], [0]
    for mol in mols:
        xs.extend(atom_features(a) for a in mol.GetAtoms())
        for bond in mol.GetBonds():
            f = bond_features(bond)
            i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
            src += [i, j]
            dst += [j, i]
            es += [f, f]
        atom_ptr.append(atom_ptr[-1] + mol.GetNumAtoms())
        edge_ptr.append(edge_ptr[-1] + 2 * mol.GetNumBonds())
    return Graphs(torch.tensor(xs, dtype=torch.float32),
                  torch.tensor(es, dtype=torch.float32).reshape(-1, bond_dim()),
                  torch.tensor(src, dtype=torch.long), torch.tensor(dst, dtype=torch.long),
                  torch.tensor(atom_ptr), torch.tensor(edge_ptr))


def bond_dim() -> int:
    _, _, bonds, stereo = _enums()
    return len(bonds) + 1 + 2 + len(stereo) + 1


def descriptor_names() -> list[str]:
    """This RDKit's 2-D descriptors, in its order (the list can change between RDKit releases)."""
    from rdkit.Chem import Descriptors

    return [n for n, _ in Descriptors.descList]


def rdkit_descriptors(mols: list, names: list[str] | None = None) -> np.ndarray:
    """RDKit's 2-D descriptors (about 210; ``names``: those, in that order, as a trained model saw them),
    non-finite values as NaN."""
    from rdkit.Chem import Descriptors

    names = names or descriptor_names()
    out = np.full((len(mols), len(names)), np.nan, dtype=np.float64)
    for i, mol in enumerate(mols):
        values = Descriptors.CalcMolDescriptors(mol, missingVal=float("nan"))
        out[i] = [values[n] for n in names]
    out[~np.isfinite(out) | (np.abs(out) > 1e30)] = np.nan  # also what would overflow float32 (e.g. Ipc)
    return out.astype(np.float32)


def morgan(mols: list, radius: int, bits: int, counts: bool) -> np.ndarray:
    from rdkit.Chem import rdFingerprintGenerator

    gen = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=bits)
    fp = gen.GetCountFingerprintAsNumPy if counts else gen.GetFingerprintAsNumPy
    return np.stack([fp(m) for m in mols]).astype(np.float32)
