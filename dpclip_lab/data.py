"""Data: the papers' synthetic constructions and small real sets that ship offline.

Nothing here touches the network. Real data come from scikit-learn's bundled
copies (breast cancer, digits); MNIST is read from IDX files at a local path
the reader supplies (:func:`load_mnist`).

Every constructor returns float64 tensors by default (``dtype=`` and ``device=``
change that) and takes an explicit ``seed`` where randomness is involved.
"""
from __future__ import annotations

import gzip
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ._validation import check_int, check_nonnegative, check_open_unit, check_positive
from .glp import GLProblem, MeanEstimation
from .losses import Huber, Logistic, Loss, Squared

__all__ = [
    "Dataset", "breast_cancer", "digits", "load_mnist", "read_idx", "write_idx",
    "song_logistic_lower_bound", "song_logistic_huber_minimizer", "song_squared_lower_bound",
    "chen_example1", "chen_example2", "chen_mixture", "dice_constant_bias", "low_rank_glp",
]


@dataclass(frozen=True)
class Dataset:
    """Lab utility: a train/test split: ``X_train [n, p]``, ``y_train [n]``, ``X_test``, ``y_test``."""

    X_train: torch.Tensor
    y_train: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor
    description: str = ""

    @property
    def n(self) -> int:
        return self.X_train.shape[0]

    @property
    def p(self) -> int:
        return self.X_train.shape[1]


def _split_standardize(X, y, *, test_size, seed, intercept, unit_norm, dtype, device, description):
    """Split, standardize with the training statistics, optionally scale rows to norm ≤ 1.

    Preprocessing is NOT private: the mean, standard deviation and (``unit_norm``) the
    largest training row norm are statistics of the training set, as in the papers'
    experiments. A privacy guarantee of a run on these data covers the training steps
    given this preprocessing; the stated domain bound ``feature_bound=1.0`` that the
    book's chapters pass to Wang et al.'s algorithms holds *because* of the scaling. A
    deployment would fix the scale from public knowledge (or spend privacy on it).
    """
    from sklearn.model_selection import train_test_split

    test_size = check_open_unit(test_size, "test_size")
    seed = check_int(seed, "seed")
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=test_size, random_state=seed, stratify=y)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd[sd == 0] = 1.0  # constant pixels in digits
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    if intercept:
        Xtr = np.hstack([Xtr, np.ones((len(Xtr), 1))])
        Xte = np.hstack([Xte, np.ones((len(Xte), 1))])
    if unit_norm:  # one scale for train and test: max train row norm becomes 1
        scale = np.linalg.norm(Xtr, axis=1).max()
        Xtr, Xte = Xtr / scale, Xte / scale
    t = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=device)  # noqa: E731
    return Dataset(t(Xtr), t(ytr), t(Xte), t(yte), description)


def _check_float_dtype(dtype, name: str = "dtype") -> None:
    """Features are real numbers: an integer dtype would truncate them (pixels in [0, 1] -> 0)."""
    if dtype is None:
        return
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch floating-point dtype (e.g. torch.float32), got {dtype!r}")
    if not dtype.is_floating_point:
        raise TypeError(f"{name} must be a floating-point dtype (torch.float32 or torch.float64): "
                        f"{dtype} would truncate the features, got {dtype!r}")


def _check_classes(classes) -> tuple[int, int]:
    """Two distinct digits ``(a, b)`` in 0–9."""
    try:
        pair = tuple(classes)
    except TypeError:
        raise TypeError(f"classes must be a pair of distinct digits (a, b) in 0-9, got {classes!r}") from None
    if len(pair) != 2:
        raise ValueError(f"classes must be a pair of distinct digits (a, b) in 0-9, got {classes!r}")
    a, b = (check_int(c, f"classes[{i}]") for i, c in enumerate(pair))
    if not (0 <= a <= 9 and 0 <= b <= 9):
        raise ValueError(f"classes must hold digits in 0-9, got {classes!r}")
    if a == b:
        raise ValueError(f"classes must be two different digits (a binary problem needs both labels), "
                         f"got {classes!r}")
    return a, b


def breast_cancer(*, seed: int = 0, test_size: float = 0.25, intercept: bool = True,
                  unit_norm: bool = True, dtype=torch.float64, device=None) -> Dataset:
    """Lab utility: scikit-learn's Wisconsin breast-cancer set (569 × 30), labels in ``{−1, +1}``.

    Standardized with training statistics, an intercept column appended, and
    all rows divided by the largest training row norm, so ``||x|| ≤ 1`` on the
    training set: then every logistic-loss gradient has norm ≤ 1 and a clip norm
    ``C ≥ 1`` never clips (Song et al.'s ``L ≥`` Lipschitz constant regime).
    The split is stratified and fixed by ``seed``.

    The training set is linearly separable, so unregularized logistic regression
    has no minimizer: constrain θ to a ball (``radius=`` in
    :func:`dpclip_lab.optima.minimize`, ``project=`` in the algorithms), as Song
    et al.'s Alg. 1 does with its constraint set.
    """
    from sklearn.datasets import load_breast_cancer

    _check_float_dtype(dtype)
    d = load_breast_cancer()
    y = np.where(d.target == 1, 1.0, -1.0)  # +1 = benign
    return _split_standardize(d.data, y, test_size=test_size, seed=seed, intercept=intercept,
                              unit_norm=unit_norm, dtype=dtype, device=device,
                              description="Wisconsin breast cancer (scikit-learn), +1 = benign")


def digits(*, seed: int = 0, test_size: float = 0.25, classes=None, intercept: bool = True,
           unit_norm: bool = True, images: bool = False, dtype=torch.float64, device=None) -> Dataset:
    """scikit-learn's 8×8 handwritten digits (1797 images, 10 classes): the laptop stand-in for the MNIST
    runs of Chen, Wu & Hong (2020), §4.

    ``classes=(a, b)`` keeps two digits with labels ``−1`` (a) and ``+1`` (b) for
    binary GLPs; otherwise labels are the integers 0–9. ``images=True`` returns
    unstandardized ``[n, 1, 8, 8]`` pixel tensors in [0, 1] for CNNs (a small
    stand-in for MNIST; say so when you use it).
    """
    from sklearn.datasets import load_digits

    d = load_digits()
    X, y = d.data.astype(np.float64), d.target.astype(np.int64)
    _check_float_dtype(dtype)
    if classes is not None:
        a, b = _check_classes(classes)
        keep = (y == a) | (y == b)
        X, y = X[keep], np.where(y[keep] == b, 1.0, -1.0)
    desc = "digits (scikit-learn, 8x8)" + (f", {a} vs {b}" if classes is not None else "")
    if images:
        from sklearn.model_selection import train_test_split

        Xtr, Xte, ytr, yte = train_test_split(X / 16.0, y, test_size=test_size, random_state=seed, stratify=y)
        img = lambda a: torch.as_tensor(a, dtype=dtype, device=device).reshape(-1, 1, 8, 8)  # noqa: E731
        lab = lambda a: torch.as_tensor(a, device=device)  # noqa: E731
        return Dataset(img(Xtr), lab(ytr), img(Xte), lab(yte), desc)
    ds = _split_standardize(X, y, test_size=test_size, seed=seed, intercept=intercept,
                            unit_norm=unit_norm, dtype=dtype, device=device, description=desc)
    if classes is None:  # integer class labels
        ds = Dataset(ds.X_train, ds.y_train.long(), ds.X_test, ds.y_test.long(), desc)
    return ds


# -- MNIST from local IDX files ---------------------------------------------------------
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path) -> np.ndarray:
    """Lab utility: read an IDX file (the MNIST format; ``.gz`` allowed) into a numpy array.

    The format of LeCun et al.'s MNIST distribution: two zero bytes, an element-type code,
    the number of dimensions, the sizes as big-endian uint32, then the data.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{path}: unknown IDX element type 0x{code:02x}")
    if len(data) < 4 + 4 * ndim:
        raise ValueError(f"{path}: truncated IDX header (it announces {ndim} dimensions, i.e. "
                         f"{4 + 4 * ndim} header bytes, but the file has {len(data)} bytes)")
    shape = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    itemsize = np.dtype(_IDX_DTYPES[code]).itemsize
    body = len(data) - 4 - 4 * ndim
    if body % itemsize or body // itemsize != math.prod(shape):
        raise ValueError(f"{path}: header says shape {shape} ({math.prod(shape)} elements) but the file "
                         f"holds {body} bytes of data ({body / itemsize:g} elements); truncated or corrupt")
    arr = np.frombuffer(data, dtype=_IDX_DTYPES[code], offset=4 + 4 * ndim)
    return arr.reshape(shape)


def write_idx(path, array: np.ndarray) -> None:
    """Lab utility: write a uint8 array as an IDX file (``tests/data/make_mnist_tiny.py`` ships a tiny MNIST)."""
    array = np.asarray(array, dtype=np.uint8)
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as f:
        f.write(bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape))
        f.write(array.tobytes())


def load_mnist(path=None, *, dtype=torch.float32, device=None, limit: int | None = None,
               fallback: str | None = None) -> Dataset:
    """Lab utility: MNIST from the four standard IDX files in a local folder (no download).

    The data of Chen, Wu & Hong (2020), §4 (and App. F–G). ``path`` defaults to the
    ``DPCLIP_MNIST`` environment variable. Files may be gzipped. Returns images
    ``[n, 1, 28, 28]`` in [0, 1] and integer labels. Raises ``FileNotFoundError`` with
    instructions if the files are absent, and ``ValueError`` naming the file if a file is
    truncated, swapped (labels where images belong) or holds labels outside 0–9. ``limit``
    (an int >= 1) keeps the first ``limit`` examples of each split; ``dtype`` must be a
    floating-point dtype.

    ``fallback="digits"``: when neither ``path`` nor ``DPCLIP_MNIST`` is given, return
    :func:`digits` ``(images=True)`` instead (8×8 images; ``limit`` applies too) — the book's
    chapters call it this way, so the same line runs on MNIST for a reader who has it.
    A path that is given but holds no MNIST still raises: the reader asked for MNIST.
    The returned ``description`` says which data set it is.
    """
    if limit is not None:
        limit = check_int(limit, "limit", minimum=1)
    _check_float_dtype(dtype)
    if fallback not in (None, "digits"):
        raise ValueError(f"fallback must be None or 'digits', got {fallback!r}")
    path = path or os.environ.get("DPCLIP_MNIST")
    if path is None and fallback == "digits":
        ds = digits(images=True, dtype=dtype, device=device)
        if limit is not None:
            ds = Dataset(ds.X_train[:limit], ds.y_train[:limit], ds.X_test[:limit], ds.y_test[:limit],
                         ds.description)
        return ds
    if path is None:
        raise FileNotFoundError("load_mnist needs path= or the DPCLIP_MNIST environment variable "
                                "pointing at a folder with the four MNIST IDX files")
    folder = Path(path)

    def find(stem):
        for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
            if (folder / name).exists():
                return folder / name
        raise FileNotFoundError(f"{folder} has no {stem}[.gz]; expected the four MNIST IDX files")

    parts = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        fx, fy = find(f"{prefix}-images-idx3-ubyte"), find(f"{prefix}-labels-idx1-ubyte")
        X, y = read_idx(fx), read_idx(fy)
        if X.ndim != 3 or X.dtype != np.uint8:
            raise ValueError(f"{fx}: expected MNIST images (uint8 array [n, rows, cols]), got a "
                             f"{X.dtype} array of shape {X.shape} (are the image and label files swapped?)")
        if y.ndim != 1 or y.dtype != np.uint8:
            raise ValueError(f"{fy}: expected MNIST labels (uint8 array [n]), got a {y.dtype} array "
                             f"of shape {y.shape} (are the image and label files swapped?)")
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"MNIST {split}: {X.shape[0]} images in {fx.name} but {y.shape[0]} labels "
                             f"in {fy.name}")
        if y.size and int(y.max()) > 9:
            bad = sorted(set(np.unique(y[y > 9]).tolist()))[:5]
            raise ValueError(f"{fy}: MNIST labels must be digits 0-9, found {bad}")
        if X.shape[0] == 0:
            raise ValueError(f"{fx}: the MNIST {split} set holds no images")
        if limit is not None:
            X, y = X[:limit], y[:limit]
        parts[split] = (torch.as_tensor(X.astype(np.float32) / 255.0, dtype=dtype, device=device).unsqueeze(1),
                        torch.as_tensor(y.astype(np.int64), device=device))
    return Dataset(*parts["train"], *parts["test"], description=f"MNIST from {folder}")


# -- the papers' constructions ------------------------------------------------------------
def song_logistic_lower_bound(n: int, *, dtype=torch.float64, device=None) -> GLProblem:
    """Song, Thakkar, Thakurta (2021), Thm 3.2: ``{(1/2, +1)}^{2n} ∪ {(1, −1)}^n``, logistic loss.

    One-dimensional (p = 1). The unclipped minimizer is ``θ* = 0``; with clip
    norm ``L < 1/2`` the clipped objective is minimized at ``θ_huber`` (see
    :func:`song_logistic_huber_minimizer`), an Ω(1) excess risk.
    """
    _check_float_dtype(dtype)
    n = check_int(n, "n", minimum=1)
    x = torch.cat([torch.full((2 * n,), 0.5), torch.ones(n)]).to(dtype=dtype, device=device)
    y = torch.cat([torch.ones(2 * n), -torch.ones(n)]).to(dtype=dtype, device=device)
    return GLProblem(x.unsqueeze(1), y, Logistic())


def song_logistic_huber_minimizer(clip_norm: float) -> float:
    """The minimizer of the clipped objective on the Thm 3.2 dataset of Song, Thakkar & Thakurta (2021):
    ``θ_huber = 2 log(1/L − 1)``.

    The paper's formula, valid for ``L < 1/2``: at ``θ_huber`` the ``(1/2, +1)``
    examples have gradient norm ``L/2`` (unclipped) and the ``(1, −1)`` examples
    ``1 − L > L`` (clipped to ``L``), and ``2n·L/2 = n·L`` balances. For
    ``L ≥ 1/2`` nothing is clipped at ``θ* = 0`` and the answer is 0.
    """
    L = check_positive(clip_norm, "clip_norm")
    return 2.0 * math.log(1.0 / L - 1.0) if L < 0.5 else 0.0


def song_squared_lower_bound(n: int, clip_norm: float, *, dtype=torch.float64, device=None) -> GLProblem:
    """Song, Thakkar & Thakurta (2021), Thm B.4: data ``{0}^n ∪ {L}^n ∪ {8L}^n`` on ``[0, 8L]``, loss ``(θ − x)²``.

    Encoded as a GLP with feature 1 and response ``x_i`` (``Squared(scale=1)``),
    so the gradient is ``2(θ − x_i)``. Minimizer ``θ* = 3L``; clipping at ``L``
    leaves an Ω(L²) excess risk, and Huberizing at 16L (no clipping on
    ``[0, 8L]``) removes it.
    """
    _check_float_dtype(dtype)
    n = check_int(n, "n", minimum=1)
    L = check_positive(clip_norm, "clip_norm")
    pts = torch.cat([torch.zeros(n), torch.full((n,), L), torch.full((n,), 8 * L)]).to(dtype=dtype, device=device)
    return GLProblem(torch.ones_like(pts).unsqueeze(1), pts, Squared(scale=1.0))


def chen_example1(*, dtype=torch.float64, device=None) -> GLProblem:
    """Chen, Wu, Hong (2020), Example 1: ``f(x) = (1/3) Σ ½(x − a_i)²``, ``a = (−3, −3, 9)``.

    ``x* = 1``; with clip norm ``c = 1`` all three gradients are clipped at
    ``x*`` and the expected clipped gradient there is ``1/3``: clipped SGD moves away.
    """
    _check_float_dtype(dtype)
    a = torch.tensor([-3.0, -3.0, 9.0], dtype=dtype, device=device)
    return GLProblem(torch.ones_like(a).unsqueeze(1), a, Squared(scale=0.5))


def chen_example2(*, dtype=torch.float64, device=None) -> GLProblem:
    """Chen, Wu, Hong (2020), Example 2: ``a = (−3, 3)``; with ``c = 1`` every ``x ∈ [−2, 2]`` is stationary."""
    _check_float_dtype(dtype)
    a = torch.tensor([-3.0, 3.0], dtype=dtype, device=device)
    return GLProblem(torch.ones_like(a).unsqueeze(1), a, Squared(scale=0.5))


def chen_mixture(n: int = 10_000, p: int = 10, *, seed: int = 0, dtype=torch.float64,
                 device=None) -> MeanEstimation:
    """Chen, Wu, Hong (2020), §5: ``z_i`` from a 3-component isotropic Gaussian mixture in ℝ^p.

    Component covariances are ``I``; the three means are drawn from
    ``N(0, 36 I)``, ``N(0, 4 I)`` and ``N(0, I)``; components equally likely (the
    paper does not give the weights — an assumption, stated in the book).
    """
    _check_float_dtype(dtype)
    n = check_int(n, "n", minimum=1)
    p = check_int(p, "p", minimum=1)
    g = torch.Generator().manual_seed(check_int(seed, "seed"))
    means = torch.randn(3, p, generator=g, dtype=torch.float64) * torch.tensor([[6.0], [2.0], [1.0]], dtype=torch.float64)
    comp = torch.randint(0, 3, (n,), generator=g)
    Z = means[comp] + torch.randn(n, p, generator=g, dtype=torch.float64)
    return MeanEstimation(Z.to(dtype=dtype, device=device))


def dice_constant_bias(clip_norm: float, *, dtype=torch.float64, device=None) -> GLProblem:
    """DiceSGD (Zhang et al. 2024), App. B.1: a problem where clipped SGD keeps an O(1) bias.

    Per-example loss: the Huber loss of ``x − ξ_i`` with threshold ``C'``
    (gradient ``clip(x − ξ_i, −C', C')``); ``N = C' + 1`` samples with
    ``ξ_i = −1`` for ``i ≤ C'`` and ``ξ_N = C'``. The stationary point of SGD is
    ``x* = 0``; clipped SGD with threshold ``C`` stops at ``C/C' − 1``.

    The paper's ``C' = [C] + 1`` is garbled in the PDF: it reads as ``⌊C⌋ + 1`` or
    ``⌈C⌉ + 1``. Both give an integer ``C' > C``, and the bias ``C/C' − 1 < 0`` holds
    for every such ``C'`` (the constant-bias chapter checks both readings). The lab
    takes ``⌊C⌋ + 1``, except that for ``C < 1`` it gives ``C' = 1``, and then every
    point of ``[C − 1, 1 − C]`` — including ``x* = 0`` — is stationary for clipped
    SGD, so the example shows no bias. So ``C' = max(⌊C⌋ + 1, 2)``: the paper's
    construction for ``C ≥ 1``, and a unique fixed point ``C/C' − 1`` for every ``C``.
    """
    _check_float_dtype(dtype)
    C = check_positive(clip_norm, "clip_norm")
    Cp = max(math.floor(C) + 1, 2)
    xi = torch.tensor([-1.0] * Cp + [float(Cp)], dtype=dtype, device=device)
    return GLProblem(torch.ones_like(xi).unsqueeze(1), xi, Huber(delta=float(Cp)))


def low_rank_glp(n: int, p: int, rank: int, *, loss=None, seed: int = 0, margin_scale: float = 4.0,
                 dtype=torch.float64, device=None) -> GLProblem:
    """A GLP whose features span a ``rank``-dimensional subspace of ℝ^p (Song, Thakkar & Thakurta (2021), §4.1).

    Features ``x_i = B^T a_i``: ``a_i ~ N(0, I_rank)`` scaled to ``||x_i|| ≤ 1`` and
    ``B [rank, p]`` with orthonormal rows drawn at random. Labels follow a
    logistic model ``P(y = +1) = σ(margin_scale · ⟨w, a_i⟩)`` with a random unit
    ``w``, so the data are not separable and the minimizer is finite.

    The same ``seed`` gives the same ``a_i`` and labels for every ``p``: the
    problems for different ``p`` are isometric copies of one another, which is
    what lets the book vary only the ambient dimension.
    """
    _check_float_dtype(dtype)
    n = check_int(n, "n", minimum=1)
    p = check_int(p, "p", minimum=1)
    rank = check_int(rank, "rank", minimum=1)
    if rank > p:
        raise ValueError(f"rank must be <= p, got rank={rank} > p={p}")
    seed = check_int(seed, "seed")
    # NaN would make every label -1 (a silent one-class problem); 0 gives coin-flip labels
    margin_scale = check_nonnegative(margin_scale, "margin_scale")
    if loss is not None and not isinstance(loss, Loss):
        raise TypeError(f"loss must be a dpclip_lab.losses.Loss, got {type(loss).__name__}")
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, rank, generator=g, dtype=torch.float64)
    A = A / torch.linalg.vector_norm(A, dim=1).max()
    w = torch.randn(rank, generator=g, dtype=torch.float64)
    w = w / w.norm()
    prob_pos = torch.sigmoid(margin_scale * A @ w / A.norm(dim=1).mean())
    y = torch.where(torch.rand(n, generator=g, dtype=torch.float64) < prob_pos, 1.0, -1.0).double()
    gb = torch.Generator().manual_seed(int(seed) + 1)
    B, _ = torch.linalg.qr(torch.randn(p, rank, generator=gb, dtype=torch.float64))
    X = A @ B.T
    return GLProblem(X.to(dtype=dtype, device=device), y.to(dtype=dtype, device=device), loss or Logistic())
