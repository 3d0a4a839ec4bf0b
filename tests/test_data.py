"""Data: real sets ship offline; the papers' constructions have the stated optima; MNIST IDX loader."""
import numpy as np
import pytest
import torch

import dpclip_lab as dl


def test_breast_cancer_is_standardized_and_unit_norm():
    ds = dl.data.breast_cancer(seed=0)
    assert ds.X_train.shape == (426, 31) and ds.X_test.shape == (143, 31)
    assert set(ds.y_train.unique().tolist()) == {-1.0, 1.0}
    assert dl.safe_norm(ds.X_train).max().item() == pytest.approx(1.0)
    assert torch.allclose(ds.X_train[:, -1], ds.X_train[0, -1].expand(426))   # intercept column
    assert torch.equal(dl.data.breast_cancer(seed=0).X_train, ds.X_train)      # deterministic
    assert not torch.equal(dl.data.breast_cancer(seed=1).X_train, ds.X_train)


def test_digits_variants():
    ds = dl.data.digits(classes=(3, 8))
    assert set(ds.y_train.unique().tolist()) == {-1.0, 1.0}
    multi = dl.data.digits()
    assert multi.y_train.dtype == torch.int64 and multi.y_train.max() == 9
    img = dl.data.digits(images=True, dtype=torch.float32)
    assert img.X_train.shape[1:] == (1, 8, 8) and img.X_train.max() <= 1.0


def test_mnist_loader_on_tiny_idx(tmp_path):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 12), ("t10k", 5)):
        dl.data.write_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        dl.data.write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", rng.integers(0, 10, n))
    ds = dl.data.load_mnist(tmp_path)
    assert ds.X_train.shape == (12, 1, 28, 28) and ds.X_test.shape == (5, 1, 28, 28)
    assert 0.0 <= ds.X_train.min() and ds.X_train.max() <= 1.0
    assert dl.data.load_mnist(tmp_path, limit=3).X_train.shape[0] == 3
    raw = dl.data.read_idx(tmp_path / "t10k-labels-idx1-ubyte")
    assert torch.equal(ds.y_test, torch.as_tensor(raw.astype(np.int64)))


def test_mnist_loader_errors(tmp_path, monkeypatch):
    monkeypatch.delenv("DPCLIP_MNIST", raising=False)
    with pytest.raises(FileNotFoundError, match="DPCLIP_MNIST"):
        dl.data.load_mnist()
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte"):
        dl.data.load_mnist(tmp_path)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        dl.data.read_idx(tmp_path / "bad")


def test_song_squared_construction():
    L = 0.5
    prob = dl.data.song_squared_lower_bound(10, L)
    assert dl.optima.minimize(prob).item() == pytest.approx(3 * L, abs=1e-5)       # mean of {0, L, 8L}
    assert dl.optima.minimize(prob, clip_norm=16 * L).item() == pytest.approx(3 * L, abs=1e-5)  # Huberize at 16L: no bias
    th = dl.optima.minimize(prob, clip_norm=L).item()
    gap = (prob.objective(torch.tensor([th], dtype=torch.float64)) - prob.objective(torch.tensor([3 * L], dtype=torch.float64))).item()
    assert gap > 0.1 * L ** 2                                                       # Ω(L²) excess risk


def test_chen_examples():
    e1 = dl.data.chen_example1()
    one = torch.tensor([1.0], dtype=torch.float64)
    assert dl.optima.minimize(e1).item() == pytest.approx(1.0, abs=1e-6)
    assert e1.clipped_grad(one, 1.0).item() == pytest.approx(1 / 3)               # moves away from x* = 1
    e2 = dl.data.chen_example2()
    xs = torch.linspace(-2, 2, 9, dtype=torch.float64)[:, None]
    assert torch.allclose(e2.clipped_grad(xs, 1.0), torch.zeros(9, 1, dtype=torch.float64))


@pytest.mark.parametrize("C", [0.3, 0.5, 1.5, 3.2])
def test_dice_constant_bias_fixed_point(C):
    prob = dl.data.dice_constant_bias(C)
    Cp = max(int(C) + 1, 2)
    assert abs(dl.optima.minimize(prob).item()) < 1e-6
    fixed = torch.tensor([C / Cp - 1], dtype=torch.float64)
    assert abs(prob.clipped_grad(fixed, C).item()) < 1e-12
    assert prob.clipped_grad(fixed + 1e-3, C).item() > 0 > prob.clipped_grad(fixed - 1e-3, C).item()


def test_bad_arguments():
    assert dl.data.song_logistic_huber_minimizer(0.7) == 0.0              # nothing clipped at θ* = 0
    with pytest.raises(ValueError, match="clip_norm must lie in"):
        dl.data.song_logistic_huber_minimizer(-0.1)
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        dl.data.song_logistic_lower_bound(0)
    with pytest.raises(ValueError, match="test_size"):
        dl.data.breast_cancer(test_size=1.5)


# -- issue #14, items 9 and 9a ---------------------------------------------------------------
def _tiny_mnist(folder, *, labels=None, swap=False, truncate=False):
    import numpy as np
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labs = np.arange(5, dtype=np.uint8) if labels is None else np.asarray(labels, dtype=np.uint8)
    for prefix in ("train", "t10k"):
        img_name, lab_name = f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"
        if swap:
            img_name, lab_name = lab_name, img_name
        dl.data.write_idx(folder / img_name, imgs)
        dl.data.write_idx(folder / lab_name, labs)
    if truncate:
        (folder / "train-labels-idx1-ubyte").write_bytes(bytes([0, 0, 8, 1, 0]))


def test_load_mnist_refuses_silent_wrong_data(tmp_path):
    _tiny_mnist(tmp_path)
    assert dl.data.load_mnist(tmp_path, limit=3).n == 3
    for bad in (-1, 0):                                 # -1 dropped one example, 0 gave an empty set
        with pytest.raises(ValueError, match="limit"):
            dl.data.load_mnist(tmp_path, limit=bad)
    with pytest.raises(TypeError, match="dtype"):
        dl.data.load_mnist(tmp_path, dtype=torch.int64)  # truncated every pixel to 0
    sw = tmp_path / "swapped"
    sw.mkdir()
    _tiny_mnist(sw, swap=True)
    with pytest.raises(ValueError, match="swapped"):
        dl.data.load_mnist(sw)
    bad_labels = tmp_path / "labels"
    bad_labels.mkdir()
    _tiny_mnist(bad_labels, labels=[0, 1, 255, 3, 4])
    with pytest.raises(ValueError, match="0-9"):
        dl.data.load_mnist(bad_labels)
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    _tiny_mnist(trunc, truncate=True)
    with pytest.raises(ValueError, match="train-labels-idx1-ubyte.*truncated"):
        dl.data.load_mnist(trunc)


@pytest.mark.parametrize("classes", [(3, 3), (3,), (3, 4, 5), (3, 12)])
def test_digits_classes_must_be_two_distinct_digits(classes):
    with pytest.raises(ValueError, match="classes"):
        dl.data.digits(classes=classes)


# --------------------------------------------------------------------------- the shipped tiny MNIST
FIXTURE = __import__("pathlib").Path(__file__).resolve().parent / "data" / "mnist_tiny"


def test_tiny_mnist_fixture_is_real_idx_and_reproducible(tmp_path):
    """tests/data/mnist_tiny holds the four MNIST files in the real IDX format, made by make_mnist_tiny.py."""
    import importlib.util

    files = sorted(p.name for p in FIXTURE.iterdir())
    assert files == ["t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "train-images-idx3-ubyte.gz",
                     "train-labels-idx1-ubyte"]
    assert sum(p.stat().st_size for p in FIXTURE.iterdir()) < 100_000
    raw = (FIXTURE / "t10k-images-idx3-ubyte").read_bytes()
    assert raw[:4] == bytes([0, 0, 0x08, 3]) and raw[4:16] == bytes.fromhex("00000010 0000001c 0000001c")
    spec = importlib.util.spec_from_file_location("make_mnist_tiny", FIXTURE.parent / "make_mnist_tiny.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for p in mod.write(tmp_path):
        assert p.read_bytes() == (FIXTURE / p.name).read_bytes(), p.name
    ds = dl.data.load_mnist(FIXTURE)
    assert ds.X_train.shape == (48, 1, 28, 28) and ds.X_test.shape == (16, 1, 28, 28)
    assert ds.y_train.dtype == torch.int64 and set(ds.y_train.tolist()) == set(range(10))
    assert float(ds.X_train.max()) == 1.0 and float(ds.X_train[:, :, :2].abs().max()) == 0.0   # padded border


def test_load_mnist_fallback(tmp_path, monkeypatch):
    monkeypatch.delenv("DPCLIP_MNIST", raising=False)
    ds = dl.data.load_mnist(limit=100, fallback="digits")
    assert ds.X_train.shape == (100, 1, 8, 8) and ds.description.startswith("digits")
    monkeypatch.setenv("DPCLIP_MNIST", str(FIXTURE))
    assert dl.data.load_mnist(fallback="digits").X_train.shape[-1] == 28      # the env var wins
    with pytest.raises(FileNotFoundError, match="train-images"):            # a given path must hold MNIST
        dl.data.load_mnist(tmp_path, fallback="digits")
    with pytest.raises(ValueError, match="fallback"):
        dl.data.load_mnist(fallback="cifar")
