"""Private training through the public ``dl.train`` vs plain SGD vs Opacus (issue #11's table).

Run:  .venv/bin/python benchmarks/bench_train.py [--quick] [--book] [--device cuda]

For each case (the benchmarks' small CNN on 8×8 and 28×28 random inputs, batch 64
and 256), contenders take ``K`` optimizer steps on batches of the same expected
size drawn from the same data set, interleaved round by round:

* ``plain SGD``: ``torch.optim.SGD``, fixed-size random batches (index + forward + backward + step),
  written as a new user writes it (the model and data as they come, channels-first);
* ``plain SGD, channels-last``: not a contender — the same loop after
  ``model.to(memory_format=torch.channels_last)``, the layout ``dl.train`` feeds CNNs on a CPU
  (:data:`dpclip_lab.ghost.CHANNELS_LAST`). The fastest plain loop here; the ``/ SGD (CL)``
  column is each contender's ratio to it, so a ratio to plain SGD that only the layout bought shows;
* ``dl.train DP-SGD`` / ``dl.train DiceSGD``: ``dl.train(..., steps=K)`` with its defaults
  (Poisson sampling, logging every 10 steps on ≤ 512 examples), layer-wise clipping
  (:mod:`dpclip_lab.ghost`, chosen automatically);
* ``dl.train DP-SGD (torch.func)``: the same with ``per_example="materialize"``;
* ``dl.train DP-SGD, 50-step runs`` / ``dl.train DiceSGD, 50-step runs``: the DP-SGD and DiceSGD
  contenders timed in runs of ``LONG_STEPS = 50`` steps. Every other ``dl.train`` call is a fresh
  run of ``K = 10`` steps. It pays the run's set-up (validation, the layer plan; ~0.3 ms) and starts
  cold, right after another contender ran (its code and data out of the CPU caches: 8×8 CNN, batch
  64, the first step +0.5 ms, the second +0.3 ms). A run of thousands of steps pays these once; the
  difference between a method's two rows is what they cost;
* ``Opacus hooks``: ``GradSampleModule`` + ``DPOptimizer`` (Opacus 1.6), fixed-size batches;
* ``Opacus ghost``: ``PrivacyEngine.make_private(..., grad_sample_mode="ghost")``;
* ``floor``: not a contender — the forward pass and the backward pass down to each layer's
  output (no parameter gradients, no norms, no update), channels-last as ``dl.train`` runs it:
  the part of a step every exact per-example clipping method does. Its ratios bound what any of
  them can reach here (e.g. a target of 0.6× Opacus hooks is out of reach where the floor is
  already near 0.6).

A second table runs the book's own models (:data:`BOOK_MODELS`: the TinyCNN on 8×8 images,
the CharModel on 64-character sequences) against plain SGD and Opacus hooks, with the floor row
(``--book``: this table alone).

Before the timed rounds every contender runs once; the ``dl.train`` contenders first take
``WARM_STEPS`` steps (:func:`dp_contender`). Their Poisson batches have a different size at
almost every step, and the first batch of a size costs more: oneDNN builds its convolution
primitives per shape (8×8 CNN, forward + backward: about +1.3 ms once per new size, against
~2 ms a step). A training run meets each likely size early and pays this once per size; the
fixed-size baselines never pay it after their first call. Without the warm-up the first timed
rounds charged it to ``dl.train`` (its 8×8 batch-64 ratio to plain SGD read 1.64 instead of ~1.45).

A ratio is the median over rounds of the ratio within a round (robust to load from
other processes). The last section reports ``dl.train``'s own overhead (a step of
``dl.train`` vs the bare oracle + noise + update on the same batch) and peak RSS of a
process running only a plain SGD step or only a ``dl.train`` DP-SGD step (28×28, batch 256).
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from dpclip_lab.training import train  # noqa: E402

K = 10  # optimizer steps per timed call
#: Untimed steps each ``dl.train`` contender takes before the timed rounds (see the module docstring):
#: enough that the Poisson batch sizes within about ±3 standard deviations of the mean have been met.
WARM_STEPS = 300
#: Not a contender: the forward pass and the backward pass down to every layer's output (no
#: parameter gradients, no per-example norms, no update) on the same batches — work any exact
#: per-example clipping method does, so its ratio is a floor for theirs on this machine.
FLOOR = "floor: fwd + layer-output bwd"
#: Not a contender: plain SGD with the model in the channels-last layout (see the module docstring).
PLAIN_CL = "plain SGD, channels-last"
#: The DP-SGD and DiceSGD contenders again, timed in runs of ``LONG_STEPS`` steps instead of ``K`` (see the
#: module docstring).
LONG_STEPS = 5 * K
LONG = f"dl.train DP-SGD, {LONG_STEPS}-step runs"
LONG_DICE = f"dl.train DiceSGD, {LONG_STEPS}-step runs"


from bench_algorithms import small_cnn  # noqa: E402  (the same model in both benchmarks; scripts run from benchmarks/)


def interleaved(fns: dict, repeats: int, steps: dict | None = None) -> dict:
    """Seconds per step of each fn, round by round: ``{name: [repeats]}``.

    A fn takes ``steps[name]`` optimizer steps per call (default: its ``steps`` attribute, else ``K``)."""
    steps = steps or {}
    times = {k: [] for k in fns}
    for f in fns.values():
        getattr(f, "warm_up", f)()
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            times[k].append((time.perf_counter() - t) / steps.get(k, getattr(f, "steps", K)))
    return times


def paired(t, a, b):
    return statistics.median(x / y for x, y in zip(t[a], t[b]))


def sgd_steps(model, opt, loss, X, y, batches):
    """K steps of the optimizer ``opt`` on ``loss(model(X[i]), y[i])``, batches ``i = batches()``: the
    plain SGD and Opacus contenders (fixed-size batches)."""
    def steps():
        for _ in range(K):
            i = batches()
            opt.zero_grad(set_to_none=True)
            loss(model(X[i]), y[i]).backward()
            opt.step()
    return steps


def layer_output_floor(model, X, y, batches, loss=F.cross_entropy):
    """K forward passes and backward passes down to each Conv1d/Conv2d/Linear/Embedding output (see ``FLOOR``),
    from the summed per-example losses as ``dl.train`` forms them, on image batches in the layout ``dl.train``
    gives them (:func:`dpclip_lab.ghost._channels_last` on a CPU)."""
    from dpclip_lab.ghost import _channels_last, _per_example_losses
    layout = _channels_last if (X.device.type == "cpu" and X.dim() == 4) else (lambda x: x)
    outs = []
    for mod in model.modules():
        if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Linear, nn.Embedding)):
            mod.register_forward_hook(lambda _m, _i, o: outs.append(o))

    def floor():
        for _ in range(K):
            i = batches()
            outs.clear()
            total = _per_example_losses(loss, model(layout(X[i])), y[i])
            torch.autograd.grad(total, outs)
    return floor


def random_batches(n, batch, device):
    """Fixed-size batches of random indices, from one seeded generator (the baselines' sampling)."""
    g = torch.Generator(device=device).manual_seed(1)
    return lambda: torch.randint(0, n, (batch,), generator=g, device=device)


def plain_sgd(model, loss, X, y, batches):
    """The plain SGD contender: ``torch.optim.SGD`` steps on ``model``."""
    return sgd_steps(model, torch.optim.SGD(model.parameters(), lr=0.01), loss, X, y, batches)


def plain_sgd_channels_last(model, loss, X, y, batches):
    """Plain SGD on ``model`` converted to channels-last (its convolutions then produce that layout;
    PyTorch's recipe, ``model.to(memory_format=torch.channels_last)``)."""
    return plain_sgd(model.to(memory_format=torch.channels_last), loss, X, y, batches)


def dp_train(model, loss, X, y, batch):
    """``dl.train`` on ``model``: ``f(steps=K, **extra)`` takes private steps (a fresh seed per call) with
    the benchmark's settings, ``extra`` selecting the method or the per-example path."""
    kw = dict(lr=0.01, clip_norm=1.0, noise_multiplier=1.0, batch_size=batch, progress=False)
    seed = iter(range(10**9))
    return lambda steps=K, **extra: train(model, loss, X, y, steps=steps, seed=next(seed), **kw, **extra)


def dp_contender(dp, steps=K, **extra):
    """A ``dl.train`` contender: each call takes ``steps`` steps of ``dp(**extra)`` (a fresh run); its
    ``warm_up()`` takes ``WARM_STEPS`` (run by :func:`interleaved` before the timed rounds)."""
    f = functools.partial(dp, steps=steps, **extra)
    f.steps = steps
    f.warm_up = lambda: dp(steps=WARM_STEPS, **extra)
    return f


def opacus_hooks(model, loss, X, y, batches, batch):
    """The Opacus hooks contender: ``GradSampleModule`` + ``DPOptimizer``, fixed-size batches."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m_op = GradSampleModule(model)
        opt = DPOptimizer(torch.optim.SGD(m_op.parameters(), lr=0.01), noise_multiplier=1.0, max_grad_norm=1.0,
                          expected_batch_size=batch)
    return sgd_steps(m_op, opt, loss, X, y, batches)


def contenders(side, batch, device, n=4096):
    torch.manual_seed(0)
    X = torch.randn(n, 1, side, side, device=device)
    y = torch.randint(0, 10, (n,), device=device)
    batches = random_batches(n, batch, device)
    dp = dp_train(small_cnn(side).to(device), F.cross_entropy, X, y, batch)
    fns = {"plain SGD": plain_sgd(small_cnn(side).to(device), F.cross_entropy, X, y, batches),
           PLAIN_CL: plain_sgd_channels_last(small_cnn(side).to(device), F.cross_entropy, X, y, batches),
           "dl.train DP-SGD": dp_contender(dp),
           "dl.train DiceSGD": dp_contender(dp, method="dice_sgd", feedback_clip_norm=2.0),
           "dl.train DP-SGD (torch.func)": dp_contender(dp, per_example="materialize"),
           LONG: dp_contender(dp, steps=LONG_STEPS),
           LONG_DICE: dp_contender(dp, steps=LONG_STEPS, method="dice_sgd", feedback_clip_norm=2.0),
           FLOOR: layer_output_floor(small_cnn(side).to(device), X, y, batches)}
    try:
        from opacus import PrivacyEngine
    except ImportError:  # pragma: no cover
        return fns
    fns["Opacus hooks"] = opacus_hooks(small_cnn(side).to(device), F.cross_entropy, X, y, batches, batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=batch)
        m_gh = small_cnn(side).to(device)
        m_gh, gh_opt, gh_crit, _ = PrivacyEngine().make_private(
            module=m_gh, optimizer=torch.optim.SGD(m_gh.parameters(), lr=0.01), data_loader=loader,
            criterion=nn.CrossEntropyLoss(), noise_multiplier=1.0, max_grad_norm=1.0,
            grad_sample_mode="ghost", poisson_sampling=False)
    fns["Opacus ghost"] = sgd_steps(m_gh, gh_opt, gh_crit, X, y, batches)
    return fns


#: The book's own models: the TinyCNN of Part IV on 8×8 one-channel images (the digits' size) and the
#: CharModel (embedding → causal Conv1d → linear) on 64-character sequences over a 30-symbol vocabulary.
BOOK_MODELS = ("TinyCNN 8x8", "CharModel L=64")


def book_model_contenders(name, batch, device, n=2048):
    """plain SGD, ``dl.train`` DP-SGD and Opacus hooks (fixed-size batches) on one of :data:`BOOK_MODELS`, and
    the :data:`FLOOR` row (not a contender: what every exact per-example clipping method does of a step)."""
    from dpclip_lab import models
    torch.manual_seed(0)
    if name == "TinyCNN 8x8":
        X, y = torch.randn(n, 1, 8, 8, device=device), torch.randint(0, 10, (n,), device=device)
        make, loss = (lambda: models.TinyCNN(8).to(device)), F.cross_entropy
    elif name == "CharModel L=64":
        X = torch.randint(1, 30, (n, 64), device=device)
        y = X  # next-character targets are the sequence itself
        make, loss = (lambda: models.CharModel(30).to(device)), models.sequence_loss
    else:
        raise ValueError(f"name must be one of {BOOK_MODELS}, got {name!r}")
    batches = random_batches(n, batch, device)
    fns = {"plain SGD": plain_sgd(make(), loss, X, y, batches),
           "dl.train DP-SGD": dp_contender(dp_train(make(), loss, X, y, batch))}
    if name == "TinyCNN 8x8":
        fns[PLAIN_CL] = plain_sgd_channels_last(make(), loss, X, y, batches)
    fns[FLOOR] = layer_output_floor(make(), X, y, batches, loss)
    try:
        fns["Opacus hooks"] = opacus_hooks(make(), loss, X, y, batches, batch)
    except ImportError:  # pragma: no cover
        pass
    return fns


def overhead(side, batch, repeats, device):
    """dl.train per step vs the bare step (oracle.reduce + noise + SGD update) on the same batches.

    ``dl.train`` is timed in calls of K and of 5K steps: the first includes its per-call
    set-up (validation, flattening, the layer plan) spread over K steps, the second is
    close to the steady per-step cost of a training run.
    """
    from dpclip_lab.ghost import ModuleOracle
    from dpclip_lab.per_sample import flat_params
    from dpclip_lab.privatizers import GaussianPrivatizer
    from dpclip_lab.sampling import make_sampler
    torch.manual_seed(0)
    n = 4096
    X = torch.randn(n, 1, side, side, device=device)
    y = torch.randint(0, 10, (n,), device=device)
    m = small_cnn(side).to(device)
    oracle = ModuleOracle(m, F.cross_entropy, X, y)
    priv = GaussianPrivatizer(1.0, 1.0)
    theta = flat_params(m).unsqueeze(0)
    state = priv.init_state(1, theta.shape[1], theta)
    gen = torch.Generator(device=device).manual_seed(0)
    sampler = make_sampler("poisson", n, batch)
    fixed = [sampler.sample(t, 1, gen, device, theta.dtype) for t in range(5 * K)]

    def bare():
        th = theta
        for b in fixed:
            d, _ = priv(oracle, th, b, state, gen)
            th = th - 0.01 * d

    kw = dict(lr=0.01, clip_norm=1.0, noise_multiplier=1.0, batch_size=batch, progress=False, seed=0)
    fns = {"bare step": bare,
           "dl.train, 10-step calls": lambda: train(m, F.cross_entropy, X, y, steps=K, **kw),
           "dl.train, 50-step calls": lambda: train(m, F.cross_entropy, X, y, steps=5 * K, **kw),
           "dl.train, 50 steps, monitor 64 ex.": lambda: train(m, F.cross_entropy, X, y, steps=5 * K,
                                                               monitor=(X[:64], y[:64]), **kw)}
    return interleaved(fns, repeats, steps={k: 5 * K for k in fns if k != "dl.train, 10-step calls"})


RSS_CHILD = r"""
import sys, torch, torch.nn.functional as F
torch.set_num_threads(1)
sys.path[:0] = [{root!r}, {root!r} + "/benchmarks"]
from bench_train import small_cnn
from dpclip_lab.training import train
torch.manual_seed(0)
X = torch.randn(2048, 1, 28, 28); y = torch.randint(0, 10, (2048,))
m = small_cnn(28)
def hwm():  # VmHWM (KiB): peak RSS of this process image (ru_maxrss would inherit the parent's)
    return float(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM")))
base = hwm()
if {mode!r} == "plain":
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for _ in range(5):
        i = torch.randint(0, 2048, (256,))
        opt.zero_grad(); F.cross_entropy(m(X[i]), y[i]).backward(); opt.step()
else:
    train(m, F.cross_entropy, X, y, steps=5, lr=0.01, clip_norm=1.0, noise_multiplier=1.0, batch_size=256,
          progress=False, seed=0, per_example={mode!r})
peak = hwm()
print(base, peak)
"""


def peak_rss(mode: str) -> tuple[float, float]:
    """(RSS before the steps, peak RSS) in MiB of a fresh process running 5 steps (28×28, batch 256)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", RSS_CHILD.format(root=root, mode=mode)], capture_output=True,
                         text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"}).stdout.split()
    return float(out[0]) / 1024, float(out[1]) / 1024


def print_case(case: str, t: dict) -> None:
    """Rows of the table for one case: ms per step and the paired ratios to the baselines present."""
    for name in t:
        if name == "plain SGD":
            continue
        ms = statistics.median(t[name]) * 1e3
        hooks = f"{paired(t, name, 'Opacus hooks'):14.2f}" if "Opacus hooks" in t else " " * 14
        ghost = f"{paired(t, name, 'Opacus ghost'):14.2f}" if "Opacus ghost" in t else ""
        cl = f"{paired(t, name, PLAIN_CL):10.2f}" if PLAIN_CL in t else " " * 10
        print(f"{case:<22}| {name:<30}| {ms:7.2f} | {paired(t, name, 'plain SGD'):5.2f} | {cl} | {hooks} | {ghost}")
    print(f"{'':<22}| {'plain SGD':<30}| {statistics.median(t['plain SGD']) * 1e3:7.2f} |")


def book_models(reps, device="cpu"):
    """The book's models' table (also ``--book``: this table alone)."""
    print("\nthe book's own models (dpclip_lab.models), batch 64:")
    for name in BOOK_MODELS:
        print_case(f"{name}, b 64", interleaved(book_model_contenders(name, 64, device), reps))


def main(quick=False, device="cpu", book_only=False):
    torch.set_num_threads(1)
    # Opacus's backward hooks warn (once per call site) that no input requires gradients: true of
    # every image batch, and not about speed; the warnings only split the table.
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    reps = 5 if quick else 11
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {device}, float32; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"\n{'case':<22}| {'contender':<30}| ms/step | / SGD | / SGD (CL) | / Opacus hooks | / Opacus ghost")
    if book_only:
        book_models(reps, device)
        return
    for side, batch in ((8, 64), (8, 256), (28, 64), (28, 256)):
        print_case(f"CNN {side}x{side}, batch {batch}", interleaved(contenders(side, batch, device), reps))
    book_models(reps, device)
    print("\ndl.train's own overhead per step (CNN 8x8 and 28x28, batch 64; the default log reads the\n"
          "steps' own losses; a monitor set is evaluated every 10 steps):")
    for side in (8, 28):
        t = overhead(side, 64, reps, device)
        for name in t:
            if name != "bare step":
                print(f"  {side}x{side}: {name:<36} / bare step = {paired(t, name, 'bare step'):.3f}")
    if device == "cpu":
        print("\npeak RSS, fresh process, CNN 28x28, batch 256 (MiB: before steps -> peak):")
        plain = peak_rss("plain")
        for mode in ("auto", "materialize"):
            ours = peak_rss(mode)
            print(f"  dl.train ({mode}): {ours[0]:.0f} -> {ours[1]:.0f}; plain SGD {plain[0]:.0f} -> {plain[1]:.0f}; "
                  f"peak ratio {ours[1] / plain[1]:.2f}, increment ratio "
                  f"{(ours[1] - ours[0]) / max(plain[1] - plain[0], 1e-9):.2f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--book", action="store_true", help="only the book's models' table")
    a = ap.parse_args()
    main(a.quick, a.device, a.book)
