import pytest
import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    """Run a test on the CPU and, where CUDA exists, on the GPU (same code)."""
    return torch.device(request.param)


def pytest_collection_modifyitems(config, items):
    """Keep each notebook's cells on one xdist worker (they share one kernel).

    ``make test`` runs ``pytest -n 2 --dist loadgroup``: the cells of a notebook
    (nbval items) form one group, so the two workers execute whole chapters side by
    side; every other test is distributed one by one. Without xdist the mark is inert.
    """
    for item in items:
        path = str(getattr(item, "path", item.fspath))
        if path.endswith(".ipynb"):
            item.add_marker(pytest.mark.xdist_group(name=path))
