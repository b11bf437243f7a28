"""The directed message-passing network (D-MPNN) and its batches: the molecules of a batch as one disjoint
graph of atoms and directed bonds.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from recipe_zoo.recipes.molecules.features import Graphs

# =============================================================================================
# The D-MPNN
# =============================================================================================

@dataclass
class GraphBatch:
    x: torch.Tensor
    edge_attr: torch.Tensor
    src: torch.Tensor
    dst: torch.Tensor
    rev: torch.Tensor
    mol_of_atom: torch.Tensor
    n_mols: int
    extra: torch.Tensor | None

    def to(self, device) -> GraphBatch:
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).to(device, non_blocking=True)
                                            for f in dataclasses.fields(self)
                                            if isinstance(getattr(self, f.name), torch.Tensor)})


def collate(g: Graphs, idx: torch.Tensor, extra: torch.Tensor | None) -> GraphBatch:
    """The molecules ``idx`` as one disjoint graph, atoms renumbered from 0 in batch order."""
    a0, a1 = g.atom_ptr[idx], g.atom_ptr[idx + 1]
    e0, e1 = g.edge_ptr[idx], g.edge_ptr[idx + 1]
    n_atoms, n_edges = a1 - a0, e1 - e0
    atoms = torch.cat([torch.arange(s, e) for s, e in zip(a0.tolist(), a1.tolist())])
    edges = torch.cat([torch.arange(s, e) for s, e in zip(e0.tolist(), e1.tolist())]
                      + [torch.zeros(0, dtype=torch.long)])
    offset = torch.repeat_interleave(torch.cumsum(n_atoms, 0) - n_atoms, n_edges)  # stored indices are per molecule
    rev = torch.arange(len(edges)) ^ 1  # bonds are stored as (i->j, j->i) pairs, each molecule's count even
    return GraphBatch(g.x[atoms], g.edge_attr[edges], g.src[edges] + offset, g.dst[edges] + offset, rev,
                      torch.repeat_interleave(torch.arange(len(idx)), n_atoms), len(idx),
                      extra[idx] if extra is not None else None)


class DMPNN(nn.Module):
    """Directed message passing over bonds (Yang et al. 2019, the chemprop architecture).

    h0(v->w) = relu(W_i [x_v, e_vw]); m(v->w) = sum of h(k->v) over k != w; h = relu(h0 + W_h m);
    after the last step atoms gather their incoming messages: h_v = relu(W_o [x_v, sum h(k->v)]).
    """

    def __init__(self, atom_dim: int, bond_dim: int, extra_dim: int, tasks: int, *, depth: int, hidden: int,
                 readout: str, ffn_hidden: int, ffn_layers: int, dropout: float):
        super().__init__()
        self.depth, self.readout = depth, readout
        self.W_i = nn.Linear(atom_dim + bond_dim, hidden, bias=False)
        self.W_h = nn.Linear(hidden, hidden, bias=False)
        self.W_o = nn.Linear(atom_dim + hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        layers, width = [], hidden + extra_dim
        for _ in range(ffn_layers - 1):
            layers += [nn.Dropout(dropout), nn.Linear(width, ffn_hidden), nn.ReLU()]
            width = ffn_hidden
        layers += [nn.Dropout(dropout), nn.Linear(width, tasks)]
        self.head = nn.Sequential(*layers)

    def forward(self, b: GraphBatch) -> torch.Tensor:
        h0 = F.relu(self.W_i(torch.cat([b.x[b.src], b.edge_attr], dim=1)))
        h = h0
        for _ in range(self.depth - 1):
            incoming = torch.zeros(len(b.x), h.size(1), device=h.device, dtype=h.dtype).index_add_(0, b.dst, h)
            h = self.dropout(F.relu(h0 + self.W_h(incoming[b.src] - h[b.rev])))
        incoming = torch.zeros(len(b.x), h.size(1), device=h.device, dtype=h.dtype).index_add_(0, b.dst, h)
        atoms = self.dropout(F.relu(self.W_o(torch.cat([b.x, incoming], dim=1))))
        mol = torch.zeros(b.n_mols, atoms.size(1), device=atoms.device, dtype=atoms.dtype)
        mol.index_add_(0, b.mol_of_atom, atoms)
        if self.readout == "mean":
            counts = torch.bincount(b.mol_of_atom, minlength=b.n_mols).clamp(min=1).unsqueeze(1)
            mol = mol / counts
        if b.extra is not None:
            mol = torch.cat([mol, b.extra], dim=1)
        return self.head(mol)


@torch.no_grad()
def predict(model: nn.Module, graphs: Graphs, idx: np.ndarray, extra, device, task: str, batch: int = 256):
    model.eval()
    out = []
    for i in range(0, len(idx), batch):
        b = collate(graphs, torch.as_tensor(idx[i:i + batch]), extra).to(device)
        out.append(model(b).float().cpu())
    p = torch.cat(out)
    return torch.sigmoid(p).numpy() if task == "classification" else p.numpy()
