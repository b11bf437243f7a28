"""Diffusion: image generation by DDPM and flow matching, unconditional or class-conditional, scored by FID.

- ``ddpm.py``: ``diffusion/ddpm``, ``diffusion/flow`` and their class-conditional ``-cfg`` variants with
  classifier-free guidance (one train function: the objectives and training; predict and export);
- ``sampling.py``: the samplers (DDIM, Euler/Heun on the flow ODE) and their images as files (``samples.png``,
  ``zoo predict``'s PNGs and grid), and the diffusers folders ``zoo export --format pretrained`` writes;
- ``data.py``: the datasets and own folders as uint8 tensors, and the model's [-1, 1] range;
- ``datasets.py``: the domain's own dataset (``mnist``: MNIST's test digits split for generative models);
- ``models.py``: the U-Net (diffusers' UNet2DModel, sized for the budget) and the FID feature networks
  (a small classifier for ``fid_zoo``, torch-fidelity's Inception-v3 for ``fid``).
"""
