"""The benchmark scripts still run against the current lab (nothing is timed or asserted about speed here)."""
import importlib.util
import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def bench_train(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_train
    monkeypatch.setattr(bench_train, "WARM_STEPS", 3)
    return bench_train


def test_dl_train_contenders_warm_up_before_the_timed_rounds(bench_train):
    """Each dl.train contender takes WARM_STEPS untimed steps first (new Poisson batch sizes cost
    more the first time), then K steps per timed call; the fixed-size baselines are called as they are."""
    calls = []
    dp = bench_train.dp_contender(lambda steps=bench_train.K, **extra: calls.append((steps, extra)), method="m")
    plain = lambda: calls.append("plain")  # noqa: E731
    times = bench_train.interleaved({"dp": dp, "plain": plain}, repeats=2)
    K, W = bench_train.K, bench_train.WARM_STEPS
    assert calls == [(W, {"method": "m"}), "plain"] + [(K, {"method": "m"}), "plain"] * 2
    assert all(len(v) == 2 for v in times.values())


def test_interleaved_divides_each_call_by_its_own_steps(bench_train, monkeypatch):
    """A contender with ``steps`` (the 50-step-run row) is timed per step over its own steps, not K."""
    calls = []
    long = bench_train.dp_contender(lambda steps=bench_train.K, **extra: calls.append(steps), steps=50)
    clock = iter(range(1000))
    monkeypatch.setattr(bench_train.time, "perf_counter", lambda: float(next(clock)))  # each call "takes" 1 s
    times = bench_train.interleaved({"long": long, "short": lambda: None}, repeats=2)
    assert calls == [bench_train.WARM_STEPS, 50, 50]
    assert times == {"long": [1 / 50] * 2, "short": [1 / bench_train.K] * 2}


def test_bench_train_contenders_each_take_their_steps(bench_train):
    pytest.importorskip("opacus")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Opacus's full-backward-hook warning
        fns = bench_train.contenders(8, 16, "cpu", n=128)
        expected = {"plain SGD", "dl.train DP-SGD", "dl.train DiceSGD", "dl.train DP-SGD (torch.func)",
                    bench_train.FLOOR, bench_train.PLAIN_CL, bench_train.LONG, bench_train.LONG_DICE, "Opacus hooks",
                    "Opacus ghost"}
        assert set(fns) == expected
        times = bench_train.interleaved(fns, repeats=1)
    assert set(times) == expected and all(len(v) == 1 and v[0] > 0 for v in times.values())
    assert fns[bench_train.LONG].steps == fns[bench_train.LONG_DICE].steps == bench_train.LONG_STEPS
    assert fns["dl.train DP-SGD"].steps == fns["dl.train DiceSGD"].steps == bench_train.K


def test_bench_train_floor_does_no_per_example_or_parameter_work(bench_train):
    """The floor row runs the forward and the backward to each layer's output only: no parameter gradients,
    but the backward does reach the first layer; its convolutions see the channels-last batches dl.train
    gives them."""
    torch.manual_seed(0)
    model = bench_train.small_cnn(8)
    X, y = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
    reached = []

    def watch(_m, inp, out):  # the first layer's output receives its gradient
        out.register_hook(lambda g: reached.append(inp[0].stride(1) == 1))
    model[0].register_forward_hook(watch)
    bench_train.layer_output_floor(model, X, y, lambda: torch.arange(16))()
    assert all(p.grad is None for p in model.parameters())
    assert reached == [True] * bench_train.K


def test_bench_train_plain_channels_last_reference_runs_in_that_layout(bench_train):
    torch.manual_seed(0)
    model = bench_train.small_cnn(8)
    X, y = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
    layouts = []
    model[3].register_forward_hook(lambda _m, inp, _o: layouts.append(
        inp[0].is_contiguous(memory_format=torch.channels_last) and inp[0].stride(1) == 1))
    bench_train.plain_sgd_channels_last(model, F.cross_entropy, X, y, lambda: torch.arange(16))()
    assert layouts == [True] * bench_train.K and all(p.grad is not None for p in model.parameters())


def test_bench_train_overhead_compares_the_same_step(bench_train):
    times = bench_train.overhead(8, 16, repeats=1, device="cpu")
    assert set(times) == {"bare step", "dl.train, 10-step calls", "dl.train, 50-step calls",
                          "dl.train, 50 steps, monitor 64 ex."}


@pytest.mark.parametrize("name", ["TinyCNN 8x8", "CharModel L=64"])
def test_bench_train_book_models_each_take_their_steps(bench_train, name, capsys):
    pytest.importorskip("opacus")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fns = bench_train.book_model_contenders(name, 16, "cpu", n=128)
        cl = {bench_train.PLAIN_CL} if name.startswith("TinyCNN") else set()
        assert set(fns) == {"plain SGD", "dl.train DP-SGD", "Opacus hooks", bench_train.FLOOR} | cl
        times = bench_train.interleaved(fns, repeats=1)
    assert all(len(v) == 1 and v[0] > 0 for v in times.values())
    bench_train.print_case(name, times)  # one row per contender, ratios to the baselines present
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 4 + len(cl) and rows[0].startswith(name) and "dl.train DP-SGD" in rows[0]
    with pytest.raises(ValueError, match="name must be one of"):
        bench_train.book_model_contenders("ResNet", 16, "cpu")


def test_bench_train_floor_of_a_sequence_model_reaches_the_embedding(bench_train):
    """The floor row of the CharModel: the per-example losses (``sequence_loss.per_example``) summed, and the
    backward down to every layer's output, the embedding's included; no parameter gradients."""
    from dpclip_lab import models
    torch.manual_seed(0)
    model = models.CharModel(12)
    X = torch.randint(1, 12, (16, 10))
    reached = []

    def watch(_m, _i, out):  # the embedding's output receives its gradient
        out.register_hook(lambda g: reached.append(g.shape))
    model.emb.register_forward_hook(watch)
    bench_train.layer_output_floor(model, X, X, lambda: torch.arange(4), models.sequence_loss)()
    assert reached == [torch.Size([4, 10, 16])] * bench_train.K
    assert all(p.grad is None for p in model.parameters())


def test_bench_gpu_tiny_runs_on_cpu(monkeypatch, tmp_path, capsys):
    """``bench_gpu.py --tiny``: both models, every contender timed, the lab on its layer-wise path, the table
    printed and the JSON written (the full sizes run on a GPU; nothing about speed is asserted)."""
    monkeypatch.syspath_prepend(str(BENCH))
    import bench_gpu
    threads = torch.get_num_threads()
    out = tmp_path / "gpu.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = bench_gpu.main(["--tiny", "--json", str(out)])
    assert torch.get_num_threads() == threads  # the benchmark's one thread is not left on the test process
    assert json.loads(out.read_text())["cases"].keys() == report["cases"].keys() == {"resnet", "gpt"}
    opacus = importlib.util.find_spec("opacus") is not None
    for case in report["cases"].values():
        assert case["per_example_path"] == "layer-wise"
        expected = {bench_gpu.PLAIN, bench_gpu.DP, bench_gpu.DICE}
        if opacus:
            expected |= {bench_gpu.HOOKS, bench_gpu.GHOST} - set(case["notes"])
        assert set(case["rows"]) == expected
        assert all(r["ms_per_step"] > 0 for r in case["rows"].values())
        assert case["rows"][bench_gpu.DP]["vs_plain"] > 0
    text = capsys.readouterr().out
    assert "/ Opacus hooks" in text and "GPT-2" in text and "ResNet-18" in text
