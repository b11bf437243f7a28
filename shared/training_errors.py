"""How a training run in the core loop ends early: its loss diverged (``Diverged``), a signal stopped it after a
checkpoint (``Interrupted``) or a step ran out of memory (``OutOfMemory``). The application turns each into its
message and exit status; an accelerator's out-of-memory error in the first step retries with a smaller batch."""
from __future__ import annotations

import math
import signal

import torch

DIVERGENCE_HINT = ("lower the LR 3-10x; clip gradients at 1.0; check inputs for inf/NaN; "
                   "logit soft-capping or QK-norm for transformers; check initialisation "
                   "(zero-init output projections); check the loss reduction under accumulation")


class Diverged(RuntimeError):
    def __init__(self, step: int, loss: float, bound: float):
        self.step, self.loss = step, loss
        why = "non-finite" if not math.isfinite(loss) else f"above the bound {bound:.4g}"
        super().__init__(f"loss {loss:.4g} at step {step} is {why}. Try: {DIVERGENCE_HINT}")


class Interrupted(RuntimeError):
    def __init__(self, signum: int, step: int):
        self.signum, self.step = signum, step
        super().__init__(f"{signal.Signals(signum).name} at step {step}; checkpoint saved, resumable")


class OutOfMemory(RuntimeError):
    """A training step ran out of device (or host) memory; carries what the fixes need to name."""

    def __init__(self, step: int, micro_batch: int, accum_steps: int, device: torch.device, precision: str,
                 can_checkpoint: bool, detail: str, recoverable: bool = False):
        self.step, self.micro_batch, self.accum_steps = step, micro_batch, accum_steps
        self.recoverable = recoverable  # an accelerator allocator's clean error (torch.OutOfMemoryError)
        self.device, self.precision, self.can_checkpoint = device, precision, can_checkpoint
        self.detail = detail.strip().splitlines()[-1][:200] if detail.strip() else "out of memory"
        super().__init__(f"out of memory at step {step} with a micro-batch of {micro_batch} "
                         f"(x{accum_steps} accumulation): {self.detail}")


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA/MPS out-of-memory errors and the CPU allocator's failure (a RuntimeError) alike."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text.lower())
