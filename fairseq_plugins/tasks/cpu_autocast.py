"""Mixed-precision training on the CPU: ``--cpu-bf16-autocast``.

fairseq's ``--amp`` autocasts on CUDA only and its ``--bf16`` implies a TPU, so a CPU training is fp32.
On a CPU with bf16 matrix instructions (AVX512-BF16, AMX) autocast makes a Transformer-base update about
1.7x faster (docs/RESULTS.md, "At base size": 8.7 s against 14.3 s an update of gec_base's training, one
thread); the weights, the
gradients and Adam's state stay fp32, as in fairseq's ``--amp``; bf16 needs no loss scaling.
"""
import contextlib
import logging

import torch

logger = logging.getLogger(__name__)


def cpu_has_bf16() -> bool:
    """Whether torch's CPU kernels (oneDNN) run bf16 matrix products natively on this machine."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    return bool(torch.backends.mkldnn.is_available() and probe is not None and probe())


def choose_autocast(requested: bool, device_type: str, bf16_available: bool):
    """(autocast on?, the log line): honoured on a CPU with bf16, otherwise a fallback that names the option."""
    if not requested:
        return False, None
    if device_type != "cpu":
        return False, (f"--cpu-bf16-autocast: the model is on {device_type}, not the CPU: ignored there "
                       f"(fairseq's --fp16 or --amp are the GPU's mixed precision)")
    if not bf16_available:
        return False, ("--cpu-bf16-autocast: this CPU has no native bf16 matrix products (AVX512-BF16 or AMX): "
                       "training in fp32")
    return True, "--cpu-bf16-autocast: forward and backward in bf16 autocast on the CPU; weights and Adam fp32"


class TrainingAutocast:
    """The context a task's train_step runs in; decided at the first step (the model's device), logged once."""

    def __init__(self, requested: bool):
        self.requested = requested
        self._enabled = None

    def context(self, model):
        if self._enabled is None:
            device_type = next(model.parameters()).device.type
            self._enabled, line = choose_autocast(self.requested, device_type,
                                                  self.requested and cpu_has_bf16())
            if line:
                logger.info(line)
        if not self._enabled:
            return contextlib.nullcontext()
        return torch.autocast("cpu", dtype=torch.bfloat16)
