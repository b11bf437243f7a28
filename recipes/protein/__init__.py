"""Protein fitness and variant effects with ESM-2 (fair-esm).

One file per recipe, each a methods section:

- ``onehot.py``: ``protein/onehot``, one-hot/BLOSUM62 per position + ridge, kernel ridge or an MLP head: the
  no-pretraining floor every protein table needs;
- ``esm_embed.py``: ``protein/esm-embed``, frozen ESM-2 embeddings (cached per sequence) or an NPZ of your own
  + the same heads;
- ``esm_finetune.py``: ``protein/esm-finetune``, ESM-2 + a head fine-tuned with LoRA or end to end (or an ESM-2
  trained from scratch);
- ``esm_zeroshot.py``: ``protein/esm-zeroshot``, masked-marginal mutation scores, no training;
- ``position_mean.py``: ``protein/position-mean``, a mutant predicted by the mean training fitness at its position:
  the baseline that says how much of a random mutant split's score is knowing the tolerant positions.

What they share: ``config.py`` (the configs, in blocks), ``datasets.py`` (the declared datasets: how each is read,
its target, its own split, a mutation table's wild type), ``sequences.py`` (``ProteinData``, the alphabet and the
checks every reader makes), ``readers.py`` (FASTA records, CSV rows), ``loading.py`` (a run's data read and split,
the split shown to the run), ``split.py`` (train / validation / test chosen by a hash of each sequence, or of each
position with split=positions), ``scoring.py`` (the metrics, the final test scoring with its bootstrap interval),
``encodings.py`` (one-hot, BLOSUM62), ``mutations.py`` (the wild type, H24C:A50G strings, mutant sequences),
``closed_form.py`` (ridge and kernel ridge), ``supervised.py`` (the MLP head and the supervised fit through the core
loop), ``heads.py`` (the head on fixed features, chosen on validation), ``esm2.py`` (ESM-2 weights, tokens, cached
embeddings, masked marginals), ``saved.py`` (a head kept as safetensors and its card, read back for predict) and
``inference.py`` (the test rows and new sequences for predict).
"""
