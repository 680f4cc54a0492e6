"""Where a model runs: the `device` setting of every model ("auto", "cpu", "cuda" or "cuda:N"),
resolved in the worker that loads the model, since the driver of a cluster may have no GPU.

`auto` takes CUDA when the model's runtime sees a CUDA device (inside a Ray actor: when the stage was
given `num_gpus`), else the CPU. An explicit `cuda` without one is an error, not a silent CPU run.
"""

import re

from vidprep.conf.checks import ConfigError

DEVICES = "auto, cpu, cuda or cuda:N"


def check_device(setting: str, device: str) -> str:
    """The device, after checking its form (not whether it exists here: that is the worker's concern)."""
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", device):
        raise ConfigError(f"{setting} must be {DEVICES}, got {device!r}")
    return device


def wants_cuda(device: str, cuda_devices: int, runtime: str) -> bool:
    """Whether a model set to `device` runs on CUDA, given the CUDA devices its runtime sees."""
    if device == "cpu":
        return False
    if device == "auto":
        return cuda_devices > 0
    if cuda_index(device) >= cuda_devices:
        raise ConfigError(f"device {device!r}: {runtime} sees {cuda_devices} CUDA devices here "
                          "(use device=auto or cpu, or give the stage num_gpus)")
    return True


def cuda_index(device: str) -> int:
    return int(device.partition(":")[2] or 0)


def _torch_cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def torch_device(device: str) -> str:
    return f"cuda:{cuda_index(device)}" if wants_cuda(device, _torch_cuda_count(), "torch") else "cpu"


def onnx_providers(device: str) -> list:
    import onnxruntime

    cuda = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
    if device != "auto" and device != "cpu" and not cuda:
        raise ConfigError(f"device {device!r}: this onnxruntime has no CUDA provider (install onnxruntime-gpu)")
    # onnxruntime has no device count of its own; torch comes with the same extra.
    if not cuda or not wants_cuda(device, _torch_cuda_count(), "onnxruntime"):
        return ["CPUExecutionProvider"]
    return [("CUDAExecutionProvider", {"device_id": cuda_index(device)}), "CPUExecutionProvider"]


def ctranslate2_device(device: str) -> tuple[str, int]:
    import ctranslate2

    if wants_cuda(device, ctranslate2.get_cuda_device_count(), "CTranslate2"):
        return "cuda", cuda_index(device)
    return "cpu", 0

