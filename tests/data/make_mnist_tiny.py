"""Write the tiny MNIST fixture in ``tests/data/mnist_tiny/`` (run: ``python tests/data/make_mnist_tiny.py``).

Four files in the real IDX format of the MNIST distribution, named as MNIST names them:
48 training and 16 test images of 28×28 pixels (uint8) with their labels (0–9). The
images are scikit-learn's 8×8 digits (shipped offline), each pixel blown up to 3×3 and
padded by 2 pixels, scaled from 0–16 to 0–255. ``train-images-idx3-ubyte.gz`` is gzipped
(with a zero timestamp, so the bytes are reproducible) to exercise the loader's ``.gz``
path; the other three are plain. ``tests/test_data.py`` checks that this script
reproduces the committed bytes, and ``tests/test_geometry.py`` runs the chapter "What
real gradient distributions look like" on the files through ``DPCLIP_MNIST``.
"""
from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np

N_TRAIN, N_TEST = 48, 16


def images_and_labels():
    """``(train_images, train_labels, test_images, test_labels)`` as uint8 arrays."""
    from sklearn.datasets import load_digits

    d = load_digits()
    imgs = np.kron(d.images[: N_TRAIN + N_TEST], np.ones((3, 3)))        # [n, 24, 24]
    imgs = np.pad(imgs, ((0, 0), (2, 2), (2, 2)))                         # [n, 28, 28]
    imgs = np.round(imgs * 255.0 / 16.0).astype(np.uint8)
    labels = d.target[: N_TRAIN + N_TEST].astype(np.uint8)
    return imgs[:N_TRAIN], labels[:N_TRAIN], imgs[N_TRAIN:], labels[N_TRAIN:]


def write(folder) -> list[Path]:
    """Write the four files into ``folder`` and return their paths."""
    from dpclip_lab.data import write_idx

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    xtr, ytr, xte, yte = images_and_labels()
    raw = folder / "train-images-idx3-ubyte"
    write_idx(raw, xtr)
    gz = folder / "train-images-idx3-ubyte.gz"
    with open(gz, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as z:
        z.write(raw.read_bytes())
    raw.unlink()
    write_idx(folder / "train-labels-idx1-ubyte", ytr)
    write_idx(folder / "t10k-images-idx3-ubyte", xte)
    write_idx(folder / "t10k-labels-idx1-ubyte", yte)
    return [gz] + [folder / n for n in ("train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                        "t10k-labels-idx1-ubyte")]


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "mnist_tiny"
    for p in write(out):
        print(p, p.stat().st_size, "bytes")
