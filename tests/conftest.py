import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    """Run a test on the CPU and, where CUDA exists, on the GPU (same code)."""
    return torch.device(request.param)

