"""Private training on a GPU: ``dl.train`` (DP-SGD, DiceSGD) against plain SGD and Opacus (issue #31, item 4).

Run:  python benchmarks/bench_gpu.py [--json PATH]      # CUDA, full sizes (writes $OUT/bench_gpu.json if OUT is set)
      .venv/bin/python benchmarks/bench_gpu.py --tiny   # CPU, tiny sizes: a smoke run (tests/test_benchmarks.py)

Two models on synthetic data, each defined here by hand (torchvision is not needed):

* **ResNet-18, GroupNorm** (:func:`resnet18_gn`): the CIFAR variant (3×3 stem, no max-pool; four stages
  of two basic blocks, 64–512 channels; 11.2 M parameters), GroupNorm instead of BatchNorm (DP-SGD needs
  per-example gradients; De et al. 2022 and the lab do the same), 32×32×3 random images, 10 classes,
  batch 256;
* **GPT-2 small** (:class:`GPT`): 12 pre-LayerNorm blocks, d = 768, 12 heads, causal self-attention
  (:class:`dpclip_lab.ghost.SelfAttention`), GELU MLP 768 → 3072 → 768, learned positions, a 50,257-token
  vocabulary; the output layer is *not* tied to the token embedding (the lab's layer rules and Opacus's
  ghost clipping both refuse tied parameters), so 163 M parameters instead of 124 M; random input and
  target tokens, sequences of 128, token cross-entropy (``dl.train``: averaged per sequence, the privacy
  unit), batch 32.

The batch sizes are physical batches that Opacus's hooks fit in a GPU's memory (its per-example
gradients of GPT-2 at batch 32: 21 GB); the papers' logical batches (about 1,000) are several such steps
with gradient accumulation, which costs each contender the same per example.

Contenders, each taking ``K`` optimizer steps per timed call, interleaved round by round:

* ``plain SGD``: ``torch.optim.SGD`` on fixed-size random batches (index + forward + backward + step);
* ``dl.train DP-SGD`` / ``dl.train DiceSGD``: ``dl.train(..., steps=K)`` with its defaults (Poisson
  sampling of the same expected batch size, the layer-wise per-example path of :mod:`dpclip_lab.ghost`,
  the default log); DiceSGD with ``feedback_clip_norm = 2 C``. Each first takes ``warm_steps`` untimed steps;
* ``Opacus hooks``: ``GradSampleModule`` + ``DPOptimizer`` (per-example gradients materialized);
* ``Opacus ghost``: ``PrivacyEngine.make_private(..., grad_sample_mode="ghost")`` (Opacus's fast gradient
  clipping, two backward passes: ghost norms for Linear and Embedding layers, the only ones Opacus 1.6 has
  norm samplers for; per-example gradients, then their norms, for convolutions and normalization layers).

Opacus is optional: without it (or where one of its modes fails on a model) its rows are absent and the
table says why. On CUDA, TF32 matrix products are allowed for every contender alike (``--no-tf32``
turns them off); float32 parameters. A ratio is the median over rounds of the ratio within a round.
The script also checks that ``dl.train`` takes the layer-wise path on each model (a model the rules did
not cover would fall back to materialized per-example gradients, and the table would time that).

``benchmarks/README.md`` ("GPU") records a run and the card it ran on.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from dpclip_lab.ghost import SelfAttention, ghost_norms_and_sum, supports  # noqa: E402
from dpclip_lab.training import train  # noqa: E402

#: Sizes of the full run (CUDA) and of the ``--tiny`` smoke run (CPU): ``K`` steps per timed call, ``repeats``
#: rounds, ``warm_steps`` untimed ``dl.train`` steps first (the baselines: one untimed call).
FULL = dict(K=5, repeats=4, warm_steps=3,
            cnn=dict(width=64, side=32, batch=256, n=4096),
            gpt=dict(vocab=50257, d=768, layers=12, heads=12, seq=128, batch=32, n=1024))
TINY = dict(K=2, repeats=1, warm_steps=1,
            cnn=dict(width=4, side=16, batch=4, n=32),
            gpt=dict(vocab=50, d=16, layers=2, heads=2, seq=8, batch=4, n=32))
PLAIN, DP, DICE, HOOKS, GHOST = "plain SGD", "dl.train DP-SGD", "dl.train DiceSGD", "Opacus hooks", "Opacus ghost"


# -- models ------------------------------------------------------------------------------------
def _gn(c: int) -> nn.GroupNorm:
    return nn.GroupNorm(math.gcd(32, c), c)


class BasicBlock(nn.Module):
    """ResNet basic block (He et al. 2016), GroupNorm after each convolution, no in-place ReLU (the lab's
    layer rules read each layer's output; an in-place activation would overwrite it)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.gn1 = _gn(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.gn2 = _gn(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _gn(cout))

    def forward(self, x):
        h = F.relu(self.gn1(self.conv1(x)))
        h = self.gn2(self.conv2(h))
        return F.relu(h + (x if self.short is None else self.short(x)))


def resnet18_gn(width: int = 64, classes: int = 10) -> nn.Module:
    """ResNet-18 for 32×32 images (3×3 stem, no max-pool), GroupNorm; ``width`` channels in the first stage."""
    layers = [nn.Conv2d(3, width, 3, 1, 1, bias=False), _gn(width), nn.ReLU()]
    cin = width
    for i, mult in enumerate((1, 2, 4, 8)):
        cout = width * mult
        layers += [BasicBlock(cin, cout, 1 if i == 0 else 2), BasicBlock(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


class Block(nn.Module):
    """A GPT-2 block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = SelfAttention(d, heads, causal=True)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """GPT-2's architecture (Radford et al. 2019), output layer untied: ``ids [B, T] -> logits [B, T, vocab]``."""

    def __init__(self, vocab: int = 50257, d: int = 768, layers: int = 12, heads: int = 12, seq: int = 1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        B, T = ids.shape
        pos = torch.arange(T, device=ids.device).repeat(B, 1)  # contiguous: Opacus's ghost embedding views it
        return self.head(self.ln_f(self.blocks(self.wte(ids) + self.wpe(pos))))


def lm_loss(logits, targets):
    """Next-token cross-entropy, mean over the batch's tokens (each sequence counts alike: equal lengths)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _lm_loss_per_example(logits, targets):
    B, T, V = logits.shape
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), reduction="none").view(B, T).mean(1)


#: One batched pass for the per-example losses (see :func:`dpclip_lab.models.sequence_loss`).
lm_loss.per_example = _lm_loss_per_example


def case(name: str, sizes: dict, device: str):
    """``(make_model, loss, X, y, batch, opacus_loss)`` of one case; ``opacus_loss(crit, out, y)`` calls
    Opacus's ghost-clipping criterion the way that case needs."""
    torch.manual_seed(0)
    if name == "resnet":
        s = sizes["cnn"]
        X = torch.randn(s["n"], 3, s["side"], s["side"], device=device)
        y = torch.randint(0, 10, (s["n"],), device=device)
        return (lambda: resnet18_gn(s["width"]).to(device)), F.cross_entropy, X, y, s["batch"], \
            (lambda crit, out, t: crit(out, t))
    s = sizes["gpt"]
    X = torch.randint(0, s["vocab"], (s["n"], s["seq"]), device=device)
    y = torch.randint(0, s["vocab"], (s["n"], s["seq"]), device=device)

    def make():
        return GPT(s["vocab"], s["d"], s["layers"], s["heads"], s["seq"]).to(device)
    return make, lm_loss, X, y, s["batch"], \
        (lambda crit, out, t: crit(out.reshape(-1, out.shape[-1]), t.reshape(-1), shape=out.shape))


def title(name: str, sizes: dict) -> str:
    if name == "resnet":
        s = sizes["cnn"]
        return f"ResNet-18 (GroupNorm, width {s['width']}), {s['side']}x{s['side']}, batch {s['batch']}"
    s = sizes["gpt"]
    return f"GPT-2 ({s['layers']} layers, d {s['d']}, vocab {s['vocab']}), seq {s['seq']}, batch {s['batch']}"


# -- contenders ----------------------------------------------------------------------------------
def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def sgd_loop(model, opt, loss, X, y, batch, K, step_loss=None):
    """K steps of ``opt`` on fixed-size random batches (one seeded generator)."""
    g = torch.Generator(device=X.device).manual_seed(1)
    step_loss = step_loss or (lambda out, t: loss(out, t))

    def steps():
        for _ in range(K):
            i = torch.randint(0, X.shape[0], (batch,), generator=g, device=X.device)
            opt.zero_grad(set_to_none=True)
            step_loss(model(X[i]), y[i]).backward()
            opt.step()
    return steps


def contenders(name: str, sizes: dict, device: str, opacus: bool = True):
    """``(fns, notes)``: the timed callables of one case, and why any Opacus row is absent."""
    make, loss, X, y, batch, op_loss = case(name, sizes, device)
    K, warm = sizes["K"], sizes["warm_steps"]
    m_plain = make()
    fns = {PLAIN: sgd_loop(m_plain, torch.optim.SGD(m_plain.parameters(), lr=0.01), loss, X, y, batch, K)}
    m_dp = make()
    kw = dict(lr=0.01, clip_norm=1.0, noise_multiplier=1.0, batch_size=batch, progress=False)
    seeds = iter(range(10**9))

    def dp(steps=K, **extra):
        return lambda: train(m_dp, loss, X, y, steps=steps, seed=next(seeds), **kw, **extra)
    for label, extra in ((DP, {}), (DICE, dict(method="dice_sgd", feedback_clip_norm=2.0))):
        f = dp(**extra)
        f.warm_up = dp(steps=warm, **extra)
        fns[label] = f
    notes = {}
    if not opacus:
        notes["Opacus"] = "not run (--no-opacus)"
        return fns, notes
    try:
        from opacus import GradSampleModule, PrivacyEngine
        from opacus.optimizers import DPOptimizer
    except ImportError as e:
        notes["Opacus"] = f"not installed ({e})"
        return fns, notes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            m_h = GradSampleModule(make())
            opt = DPOptimizer(torch.optim.SGD(m_h.parameters(), lr=0.01), noise_multiplier=1.0,
                              max_grad_norm=1.0, expected_batch_size=batch)
            fns[HOOKS] = sgd_loop(m_h, opt, loss, X, y, batch, K)
        except Exception as e:  # noqa: BLE001  (a row the table then explains)
            notes[HOOKS] = f"{type(e).__name__}: {e}"
        try:
            m_g = make()
            loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, y), batch_size=batch)
            m_g, g_opt, g_crit, _ = PrivacyEngine().make_private(
                module=m_g, optimizer=torch.optim.SGD(m_g.parameters(), lr=0.01), data_loader=loader,
                criterion=nn.CrossEntropyLoss(), noise_multiplier=1.0, max_grad_norm=1.0,
                grad_sample_mode="ghost", poisson_sampling=False)
            fns[GHOST] = sgd_loop(m_g, g_opt, loss, X, y, batch, K, lambda out, t: op_loss(g_crit, out, t))
        except Exception as e:  # noqa: BLE001
            notes[GHOST] = f"{type(e).__name__}: {e}"
    return fns, notes


def layerwise_path(name: str, sizes: dict, device: str) -> str:
    """Which per-example path ``dl.train`` takes on the case's model: ``"layer-wise"`` when every parameter
    is covered and a batch of two goes through the layer rules, else why not."""
    make, loss, X, y, _, _ = case(name, sizes, device)
    model = make()
    if not supports(model):
        return "materialized (unsupported parameters)"
    try:
        ghost_norms_and_sum(model, loss, X[:2], y[:2], None)
    except Exception as e:  # noqa: BLE001  (_Fallback: the forward does not fit the rules)
        return f"materialized ({type(e).__name__}: {e})"
    return "layer-wise"


def interleaved(fns: dict, repeats: int, K: int, device: str, notes: dict) -> tuple[dict, dict]:
    """``({name: [seconds per step, one per round]}, {name: peak memory of its warm-up call, GiB})``.

    Each fn is called once untimed (``warm_up`` if it has one), then once per round, round-robin. An Opacus
    contender that raises in its first call is dropped, and ``notes`` says why."""
    times, peak = {k: [] for k in fns}, {}
    for k, f in list(fns.items()):
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        try:
            getattr(f, "warm_up", f)()
            _sync(device)
        except Exception as e:  # noqa: BLE001  an Opacus mode that fails on the model: its row is absent
            if not k.startswith("Opacus"):
                raise
            notes[k] = f"{type(e).__name__}: {str(e)[:200]}"
            del fns[k], times[k]
            if device == "cuda":
                torch.cuda.empty_cache()
            continue
        if device == "cuda":
            peak[k] = torch.cuda.max_memory_allocated() / 2**30
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            _sync(device)
            times[k].append((time.perf_counter() - t) / K)
    return times, peak


def paired(t: dict, a: str, b: str) -> float:
    """Median over rounds of ``t[a] / t[b]`` within a round (NaN when ``b`` did not run)."""
    if b not in t:
        return float("nan")
    return statistics.median(x / y for x, y in zip(t[a], t[b]))


def summarize(times: dict, peak: dict) -> dict:
    """``{name: {"ms_per_step", "vs_plain", "vs_opacus_hooks", "vs_opacus_ghost", "peak_gib"}}``."""
    return {k: {"ms_per_step": statistics.median(v) * 1e3, "vs_plain": paired(times, k, PLAIN),
                "vs_opacus_hooks": paired(times, k, HOOKS), "vs_opacus_ghost": paired(times, k, GHOST),
                "peak_gib": peak.get(k)} for k, v in times.items()}


def print_table(title: str, rows: dict, notes: dict, path: str) -> None:
    def f(x):
        return "   -  " if x is None or x != x else f"{x:6.2f}"
    print(f"\n{title}  (dl.train's per-example path: {path})")
    print(f"{'contender':<18}| ms/step | / plain | / Opacus hooks | / Opacus ghost | peak GiB")
    for k, r in rows.items():
        print(f"{k:<18}| {r['ms_per_step']:7.2f} | {f(r['vs_plain'])}  | {f(r['vs_opacus_hooks'])}         | "
              f"{f(r['vs_opacus_ghost'])}         | {f(r['peak_gib'])}")
    for k, why in notes.items():
        print(f"  {k}: {why}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke run; CPU unless --device)")
    ap.add_argument("--device", default=None, help="default: cuda, or cpu with --tiny")
    ap.add_argument("--cases", default="resnet,gpt", help="comma-separated: resnet, gpt")
    ap.add_argument("--no-opacus", action="store_true")
    ap.add_argument("--no-tf32", action="store_true")
    ap.add_argument("--json", default=None, help="default: $OUT/bench_gpu.json when OUT is set")
    a = ap.parse_args(argv)
    device = a.device or ("cpu" if a.tiny else "cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available: run with --tiny (CPU) or on a machine with a GPU")
    sizes = TINY if a.tiny else FULL
    tf32 = device == "cuda" and not a.no_tf32
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    card = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()
    try:
        import opacus
        op_version = opacus.__version__
    except ImportError:
        op_version = None
    print(f"torch {torch.__version__}, opacus {op_version}, {device} ({card}), float32, TF32 {tf32}; "
          f"{sizes['K']} steps per timed call, {sizes['repeats']} rounds")
    report = {"device": device, "card": card, "torch": torch.__version__, "opacus": op_version, "tf32": tf32,
              "tiny": a.tiny, "K": sizes["K"], "repeats": sizes["repeats"], "sizes": sizes, "cases": {}}
    out = a.json or (os.path.join(os.environ["OUT"], "bench_gpu.json") if os.environ.get("OUT") else None)
    threads = torch.get_num_threads()
    try:
        if device == "cpu":
            torch.set_num_threads(1)  # as the CPU benchmarks: no thread contention with other processes
        for name in a.cases.split(","):
            with warnings.catch_warnings():
                # Opacus's backward hooks warn that no input requires gradients (true of images; not about speed)
                warnings.filterwarnings("ignore", message="Full backward hook is firing")
                warnings.filterwarnings("ignore", message="Using a non-full backward hook")
                path = layerwise_path(name, sizes, device)
                fns, notes = contenders(name, sizes, device, opacus=not a.no_opacus)
                times, peak = interleaved(fns, sizes["repeats"], sizes["K"], device, notes)
            rows = summarize(times, peak)
            print_table(title(name, sizes), rows, notes, path)
            report["cases"][name] = {"title": title(name, sizes), "per_example_path": path, "rows": rows,
                                     "notes": notes, "seconds_per_step": times}
            del fns
            if device == "cuda":
                torch.cuda.empty_cache()
            if out:  # after each case: a run stopped later keeps what it measured
                with open(out, "w") as fh:
                    json.dump(report, fh, indent=1, default=lambda x: None)
    finally:
        torch.set_num_threads(threads)
    if out:
        print(f"\nwrote {out}")
    return report


if __name__ == "__main__":
    main()
