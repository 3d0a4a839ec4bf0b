"""Issue #31, item 2: the lab's accountants and remedies inside Opacus (``dpclip_lab.opacus``).

Contract: for the same batches and noise, an Opacus training loop with the lab's DiceSGD
optimizer gives the θ of ``dl.train(method="dice_sgd")`` (to 1e-6 relative), and its
accountant reports the lab's DiceSGD record — never Opacus's Poisson DP-SGD one. The same for
quantile clipping against ``method="adaptive"``, through ``make_private``, through a hand-built
optimizer on a stock ``opacus.PrivacyEngine``, and through Opacus's distributed path (2 gloo
ranks). Opacus is optional: the lab imports without it, and this module says how to install it.
"""
from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parameters_to_vector

opacus = pytest.importorskip("opacus")
# Opacus's hooks on a model whose inputs need no gradient (as every Opacus tutorial's): torch's notice, not ours.
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook is firing:UserWarning")

import dpclip_lab as dl  # noqa: E402
from dpclip_lab.accountants.calibration import make_accountant  # noqa: E402
from dpclip_lab.opacus import (DiceSGDOptimizer, LabBatchSampler, LabPLDAccountant, LabRDPAccountant,  # noqa: E402
                               PrivacyEngine, QuantileClippingOptimizer, lab_data_loader, make_opacus_accountant)

N, B, T, SEED = 96, 24, 6, 3
KW = dict(steps=T, lr=0.5, clip_norm=0.5, noise_multiplier=1.0, batch_size=B, seed=SEED, progress=False)
#: dl.train method -> (make_private clipping, extra arguments of both)
METHODS = {"dice_sgd": ("dice_sgd", dict(feedback_clip_norm=1.0)), "adaptive": ("quantile", {})}


def _data():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(N, 6, generator=g)
    return X, (X[:, 0] + X[:, 1] > 0).long()


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))


def _train_lab(method):
    X, y = _data()
    return dl.train(_model(), F.cross_entropy, X, y, method=method, **KW, **METHODS[method][1])


def _loop(model, optimizer, loader):
    for xb, yb in loader:
        optimizer.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        optimizer.step()


def _opacus_run(method, accountant="rdp", distributed=False):
    """make_private with the lab's clipping, on the lab's batches and noise stream (seed SEED)."""
    X, y = _data()
    gen = torch.Generator().manual_seed(SEED)  # batches and noise: the stream dl.train draws from
    loader = lab_data_loader(torch.utils.data.TensorDataset(X, y), B, steps=T, generator=gen,
                             distributed=distributed)
    model = _model()
    module = model
    if distributed:
        from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
        module = DPDDP(model)
    clipping, extra = METHODS[method]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus: "Secure RNG turned off"
        engine = PrivacyEngine(accountant=accountant)
        wrapped, optimizer, loader = engine.make_private(
            module=module, optimizer=torch.optim.SGD(model.parameters(), lr=KW["lr"]), data_loader=loader,
            noise_multiplier=KW["noise_multiplier"], max_grad_norm=KW["clip_norm"], clipping=clipping,
            noise_generator=gen, **extra)
    _loop(wrapped, optimizer, loader)
    return parameters_to_vector(model.parameters()).detach(), engine, optimizer


def _rel(a, b):
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("method", list(METHODS))
def test_opacus_loop_with_the_labs_optimizer_is_dl_train(method):
    ref = _train_lab(method)
    theta, engine, optimizer = _opacus_run(method)
    assert _rel(theta, ref.theta) <= 1e-6
    assert type(optimizer) is {"dice_sgd": DiceSGDOptimizer, "adaptive": QuantileClippingOptimizer}[method]
    assert len(engine.accountant) == T
    assert engine.accountant.dp_event() == ref.dp_event()
    assert engine.get_epsilon(1e-5) == make_accountant("rdp").compose(ref.dp_event()).get_epsilon(1e-5)
    fc = torch.cat([optimizer.last_stats["fraction_clipped"]])
    assert float(fc[0]) == pytest.approx(float(ref.history["fraction_clipped"][-1]))


def test_dice_sgd_record_is_dicesgds_not_poisson_dp_sgd():
    ref = _train_lab("dice_sgd")
    _, engine, optimizer = _opacus_run("dice_sgd", accountant="pld")
    assert isinstance(engine.accountant, LabPLDAccountant)
    z_eff = ref.effective_noise_multiplier()
    assert engine.accountant.history == [(z_eff, 1.0, T)]        # T Gaussian steps, no amplification
    eps = engine.get_epsilon(1e-5)
    assert eps == make_accountant("pld").compose(ref.dp_event()).get_epsilon(1e-5)
    assert eps == pytest.approx(ref.epsilon(1e-5, accountant="pld"))
    opacus_dp_sgd = opacus.accountants.RDPAccountant()
    for _ in range(T):
        opacus_dp_sgd.step(noise_multiplier=KW["noise_multiplier"], sample_rate=B / N)
    assert eps > 10 * opacus_dp_sgd.get_epsilon(1e-5)            # what Opacus would have claimed
    assert optimizer.error is not None and optimizer.error.shape == ref.extra["error"].shape
    assert _rel(optimizer.error, ref.extra["error"]) <= 1e-5     # the hidden state follows too


def test_hand_built_optimizer_on_stock_opacus():
    """The recipe without the lab's engine: GradSampleModule + DiceSGDOptimizer + a lab accountant hook."""
    from opacus import GradSampleModule
    ref = _train_lab("dice_sgd")
    X, y = _data()
    gen = torch.Generator().manual_seed(SEED)
    loader = lab_data_loader(torch.utils.data.TensorDataset(X, y), B, steps=T, generator=gen)
    model = _model()
    optimizer = DiceSGDOptimizer(torch.optim.SGD(model.parameters(), lr=KW["lr"]), noise_multiplier=1.0,
                                 max_grad_norm=0.5, feedback_clip_norm=1.0, expected_batch_size=B, generator=gen)
    accountant = LabRDPAccountant()
    optimizer.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=B / N))
    _loop(GradSampleModule(model), optimizer, loader)
    assert _rel(parameters_to_vector(model.parameters()).detach(), ref.theta) <= 1e-6
    assert accountant.dp_event() == ref.dp_event()
    # Opacus's own accountants are refused: they would record Poisson DP-SGD
    with pytest.raises(ValueError, match="accountant"):
        optimizer.attach_step_hook(opacus.accountants.RDPAccountant().get_optimizer_hook_fn(sample_rate=B / N))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stock = opacus.PrivacyEngine(accountant="lab_rdp")   # registered with Opacus under that name
    assert isinstance(stock.accountant, LabRDPAccountant)


def test_make_private_with_epsilon_calibrates_dicesgds_record():
    X, y = _data()
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant="rdp")
        wrapped, optimizer, loader = engine.make_private_with_epsilon(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
            data_loader=lab_data_loader(torch.utils.data.TensorDataset(X, y), B, steps=T, generator=0),
            target_epsilon=8.0, target_delta=1e-5, epochs=1, max_grad_norm=0.5, clipping="dice_sgd",
            feedback_clip_norm=1.0)
    assert optimizer.noise_multiplier == pytest.approx(dl.algorithms.dicesgd_noise_multiplier(
        8.0, 1e-5, T, 0.5, 1.0, B))
    _loop(wrapped, optimizer, loader)
    assert 7.9 <= engine.get_epsilon(1e-5) <= 8.0


def test_accountants_speak_opacus():
    acc = LabRDPAccountant()
    assert isinstance(acc, opacus.accountants.IAccountant) and acc.mechanism() == "lab_rdp"
    assert acc.get_epsilon(1e-5) == 0.0 and len(acc) == 0
    for _ in range(3):
        acc.step(noise_multiplier=1.1, sample_rate=0.01)
    acc.step(noise_multiplier=0.9, sample_rate=0.01)
    assert acc.history == [(1.1, 0.01, 3), (0.9, 0.01, 1)] and len(acc) == 4
    direct = make_accountant("rdp").compose(
        dl.ComposedEvent((dl.SelfComposedEvent(dl.PoissonSampledEvent(0.01, dl.GaussianEvent(1.1)), 3),
                          dl.SelfComposedEvent(dl.PoissonSampledEvent(0.01, dl.GaussianEvent(0.9)), 1))))
    assert acc.get_epsilon(1e-5) == direct.get_epsilon(1e-5)
    one = LabPLDAccountant()
    for _ in range(50):
        one.step(noise_multiplier=1.0, sample_rate=0.02)
    assert one.get_epsilon(1e-5) == pytest.approx(
        dl.get_epsilon(noise_multiplier=1.0, sample_rate=0.02, steps=50, delta=1e-5, accountant="pld"))
    state = acc.state_dict()
    assert state["mechanism"] == "lab_rdp"
    again = opacus.accountants.create_accountant("lab_rdp")
    again.load_state_dict(state)
    assert again.history == acc.history and again.get_epsilon(1e-5) == acc.get_epsilon(1e-5)
    with pytest.raises(ValueError, match="mechanism"):
        LabPLDAccountant().load_state_dict(state)


def test_flat_dp_sgd_through_the_labs_engine_is_recorded_by_the_lab():
    X, y = _data()
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = PrivacyEngine(accountant="rdp")
        wrapped, optimizer, loader = engine.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
            data_loader=lab_data_loader(torch.utils.data.TensorDataset(X, y), B, steps=4, generator=1),
            noise_multiplier=1.0, max_grad_norm=0.5)
    assert type(optimizer) is opacus.optimizers.DPOptimizer and optimizer.expected_batch_size == B
    _loop(wrapped, optimizer, loader)
    assert engine.accountant.history == [(1.0, B / N, 4)]


def test_lab_batches_are_dl_trains():
    """The lab sampler's first batches are those dl.train draws (same seed, same stream)."""
    for sampling in ("poisson", "shuffle", "with_replacement", "full"):
        bs = None if sampling == "full" else B
        got = list(LabBatchSampler(N, bs, steps=3, sampling=sampling, generator=SEED))
        stream = dl.sampling.batch_stream(dl.sampling.make_sampler(sampling, N, bs), 0, 1,
                                          torch.Generator().manual_seed(SEED), "cpu")
        assert got == [next(stream).padded()[0].reshape(-1).tolist() for _ in range(3)]


def test_bad_input_names_the_parameter():
    model = _model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="feedback_clip_norm"):
        DiceSGDOptimizer(sgd, noise_multiplier=1.0, max_grad_norm=2.0, feedback_clip_norm=1.0, expected_batch_size=8)
    with pytest.raises(ValueError, match="loss_reduction"):
        DiceSGDOptimizer(sgd, noise_multiplier=1.0, max_grad_norm=1.0, feedback_clip_norm=1.0, expected_batch_size=8,
                         loss_reduction="sum")
    with pytest.raises(ValueError, match="secure_mode"):
        QuantileClippingOptimizer(sgd, noise_multiplier=1.0, max_grad_norm=1.0, expected_batch_size=8,
                                  secure_mode=True)
    with pytest.raises(ValueError, match="expected_batch_size"):
        QuantileClippingOptimizer(sgd, noise_multiplier=1.0, max_grad_norm=1.0, expected_batch_size=None)
    with pytest.raises(ValueError, match="target_quantile"):
        QuantileClippingOptimizer(sgd, noise_multiplier=1.0, max_grad_norm=1.0, expected_batch_size=8,
                                  target_quantile=1.5)
    acc = LabRDPAccountant()
    with pytest.raises(ValueError, match="noise_multiplier"):
        acc.step(noise_multiplier=-1.0, sample_rate=0.1)
    with pytest.raises(ValueError, match="sample_rate"):
        acc.step(noise_multiplier=1.0, sample_rate=1.5)
    with pytest.raises(ValueError, match="delta"):
        acc.get_epsilon(2.0)
    with pytest.raises(ValueError, match="accountant"):
        make_opacus_accountant("prv")
    with pytest.raises(ValueError, match="steps"):
        LabBatchSampler(N, B, steps=0)
    with pytest.raises(ValueError, match="sampling"):
        LabBatchSampler(N, B, steps=2, sampling="stratified")
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="grad_sample_mode"):
            PrivacyEngine().make_private(module=model, optimizer=sgd, data_loader=lab_data_loader(
                torch.utils.data.TensorDataset(X, y), B, steps=2), noise_multiplier=1.0, max_grad_norm=1.0,
                clipping="dice_sgd", feedback_clip_norm=1.0, grad_sample_mode="ghost")
        with pytest.raises(ValueError, match="sampling='poisson'"):
            PrivacyEngine().make_private(module=_model(), optimizer=sgd, data_loader=lab_data_loader(
                torch.utils.data.TensorDataset(X, y), B, steps=2, sampling="shuffle"), noise_multiplier=1.0,
                max_grad_norm=1.0, clipping="quantile")
        with pytest.raises(ValueError, match="accountant"):  # Opacus's PRV accountant would record DP-SGD
            m = _model()
            PrivacyEngine(accountant="prv").make_private(
                module=m, optimizer=torch.optim.SGD(m.parameters(), lr=0.1),
                data_loader=lab_data_loader(torch.utils.data.TensorDataset(X, y), B, steps=2),
                noise_multiplier=1.0, max_grad_norm=1.0, clipping="dice_sgd", feedback_clip_norm=1.0)


def test_the_lab_imports_without_opacus():
    """Opacus hidden: ``import dpclip_lab`` works; ``import dpclip_lab.opacus`` says how to install it."""
    code = ("import sys; sys.modules['opacus'] = None\n"
            "import dpclip_lab, dpclip_lab.training\n"
            "try:\n    import dpclip_lab.opacus\nexcept ImportError as e:\n    print('ImportError:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    assert "ImportError:" in out.stdout and "pip install opacus" in out.stdout


# -- Opacus's distributed path: 2 gloo ranks --------------------------------------------------------
def _worker(rank, world, port, out):
    torch.set_num_threads(1)
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    res = {}
    for method in METHODS:
        theta, engine, optimizer = _opacus_run(method, distributed=True)
        res[method] = (theta, engine.accountant.dp_event(), type(optimizer).__name__)
    torch.save(res, os.path.join(out, f"rank{rank}.pt"))
    dist.destroy_process_group()


def test_distributed_optimizers_are_dl_train(tmp_path):
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    got = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for method in METHODS:
        ref = _train_lab(method)
        for r in range(2):
            theta, event, name = got[r][method]
            assert name.startswith("Distributed")
            assert _rel(theta, ref.theta) <= 1e-6, (method, r)
            assert torch.equal(theta, got[0][method][0])
            assert event == ref.dp_event()
