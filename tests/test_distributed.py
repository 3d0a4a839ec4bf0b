"""Issue #31, item 1: data-parallel ``dl.train`` on a torch.distributed process group.

Contract: on 2 and 3 ranks (gloo, CPU, 127.0.0.1) every rank releases the θ of the one-process
run with the same seed (to 1e-6 relative; the ranks agree exactly) and the same privacy
record; a rank that dies mid-run makes the others fail with a clear error, not hang.

One spawn of 3 processes serves every multi-process check (importing torch and the lab is most
of its cost): the 3-rank runs use the default group (``distributed=None`` detects it), the
2-rank runs a subgroup of ranks 0 and 1 (``distributed=group``), then mismatched seeds and
finally rank 2 dying at step 3. The one-process references run here, in the test process.
"""
from __future__ import annotations

import datetime
import os
import socket

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import dpclip_lab as dl
from dpclip_lab.accountants.calibration import make_accountant
from dpclip_lab.algorithms.distributed import DataParallelError, share

KW = dict(steps=5, lr=0.5, clip_norm=0.5, noise_multiplier=1.0, batch_size=24, seed=3, progress=False, log_every=2)
#: Runs on all 3 ranks (default group) and on ranks 0, 1 (a subgroup): (method, sampling, per_example, extras).
THREE = {"dp_sgd": dict(method="dp_sgd"),
         "dice_sgd": dict(method="dice_sgd", feedback_clip_norm=1.0),
         "adaptive (shuffle)": dict(method="adaptive", sampling="shuffle")}
TWO = {"pre-clip (materialize)": dict(method="dp_sgd", pre_clip_std=0.3, per_example="materialize"),
       "dice_sgd (with replacement)": dict(method="dice_sgd", feedback_clip_norm=1.0, sampling="with_replacement"),
       "adaptive": dict(method="adaptive")}
DIE_AT = 3  # rank 2 exits in the forward pass of this step


def _data(n=90):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(n, 6, generator=g)
    return X, (X[:, 0] + X[:, 1] > 0).long()


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))


def _summary(res):
    return {"theta": res.theta, "event": res.dp_event(), "log": res.extra["log"],
            "data_parallel": res.extra.get("data_parallel")}


def _worker(rank, world, port, out):
    """One rank: the runs of THREE (all ranks), TWO (ranks 0, 1), a mismatch, then rank 2 dies."""
    torch.set_num_threads(1)
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    pair = dist.new_group([0, 1])  # every rank takes part in creating it
    X, y = _data()
    results = {}
    for name, kw in THREE.items():
        results[("3", name)] = _summary(dl.train(_model(), F.cross_entropy, X, y, **{**KW, **kw}))
    if rank < 2:
        for name, kw in TWO.items():
            results[("2", name)] = _summary(dl.train(_model(), F.cross_entropy, X, y, distributed=pair,
                                                     **{**KW, **kw}))
    try:  # each rank its own seed: every rank must refuse, naming the seed
        dl.train(_model(), F.cross_entropy, X, y, **{**KW, "seed": rank})
    except ValueError as err:
        results["mismatch"] = str(err)
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))

    calls = [0]

    def loss(outputs, targets):
        calls[0] += 1
        if rank == 2 and calls[0] == DIE_AT:
            os._exit(1)  # dies mid-run, without a word to the others
        return F.cross_entropy(outputs, targets)

    try:
        dl.train(_model(), loss, X, y, **{**KW, "steps": 8})
        died = ("no error", "")
    except Exception as err:  # noqa: BLE001 - what the survivors see is the point of the test
        died = (type(err).__name__, str(err))
    torch.save(died, os.path.join(out, f"died{rank}.pt"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """The files of the 3 spawned ranks, and their exit codes."""
    import torch.multiprocessing as mp
    out = str(tmp_path_factory.mktemp("ranks"))
    ctx = mp.spawn(_worker, args=(3, _free_port(), out), nprocs=3, join=False)
    for p in ctx.processes:
        p.join(180)
    for p in ctx.processes:  # only if something hung: ours, by handle
        if p.is_alive():
            p.kill()
    codes = [p.exitcode for p in ctx.processes]

    def load(name):  # None: the rank never wrote it (rank 2 dies before its second file)
        path = os.path.join(out, name)
        return torch.load(path, weights_only=False) if os.path.exists(path) else None

    return {"codes": codes, "runs": [load(f"rank{r}.pt") for r in range(3)],
            "died": [load(f"died{r}.pt") for r in range(3)]}


def _reference(kw):
    X, y = _data()
    return dl.train(_model(), F.cross_entropy, X, y, **{**KW, **kw})


@pytest.mark.parametrize("world,name", [("3", n) for n in THREE] + [("2", n) for n in TWO])
def test_every_rank_releases_the_one_process_run(ranks, world, name):
    ref = _reference((THREE if world == "3" else TWO)[name])
    W = int(world)
    got = [ranks["runs"][r][(world, name)] for r in range(W)]
    for r, g in enumerate(got):
        rel = float((g["theta"] - ref.theta).norm() / ref.theta.norm())
        assert rel <= 1e-6, f"rank {r} of {W}: θ differs from the one-process run by {rel:.2e} (relative)"
        assert torch.equal(g["theta"], got[0]["theta"]), f"rank {r} and rank 0 disagree"
        assert g["event"] == ref.dp_event()
        assert g["data_parallel"]["world_size"] == W and g["data_parallel"]["rank"] == r
        # the default log: the whole batch's fraction clipped, loss and accuracy, as one process logs them
        assert g["log"]["step"] == ref.extra["log"]["step"]
        assert g["log"]["fraction_clipped"] == ref.extra["log"]["fraction_clipped"]
        assert g["log"]["accuracy"] == ref.extra["log"]["accuracy"]
        assert g["log"]["loss"] == pytest.approx(ref.extra["log"]["loss"], rel=1e-6)
    acc = make_accountant("rdp")
    assert acc.compose(got[0]["event"]).get_epsilon(1e-5) == make_accountant("rdp").compose(
        ref.dp_event()).get_epsilon(1e-5)


def test_ranks_that_disagree_refuse_together(ranks):
    for r in range(3):
        msg = ranks["runs"][r]["mismatch"]
        assert "seed" in msg and "differs across the 3 ranks" in msg


def test_a_dead_rank_fails_the_run_on_the_others(ranks):
    assert ranks["codes"] == [0, 0, 1], ranks["codes"]   # the survivors returned; nobody hung
    assert ranks["died"][2] is None
    for r in (0, 1):
        kind, msg = ranks["died"][r]
        assert kind == "DataParallelError", (kind, msg)
        assert f"rank {r} of 3" in msg and f"step {DIE_AT}" in msg and "died" in msg and "timeout" in msg


# -- one process: the same code path on a group of one, and bad input -------------------------------
def test_a_group_of_one_is_the_one_process_run():
    import torch.distributed as dist
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        X, y = _data()
        for kw in (THREE["dice_sgd"], TWO["pre-clip (materialize)"]):
            auto = dl.train(_model(), F.cross_entropy, X, y, **{**KW, **kw})  # one process: not data-parallel
            assert "data_parallel" not in auto.extra
            dp = dl.train(_model(), F.cross_entropy, X, y, distributed=True, **{**KW, **kw})
            assert dp.extra["data_parallel"] == {"rank": 0, "world_size": 1, "backend": "gloo"}
            assert torch.allclose(dp.theta, auto.theta, rtol=1e-6, atol=1e-7)
            assert dp.dp_event() == auto.dp_event()
            assert dp.extra["log"]["fraction_clipped"] == auto.extra["log"]["fraction_clipped"]
        with pytest.raises(TypeError, match="seed must be an integer or None"):
            dl.train(_model(), F.cross_entropy, X, y, distributed=True, **{**KW, "seed": torch.Generator()})
    finally:
        dist.destroy_process_group()


def test_bad_distributed_argument():
    X, y = _data()
    with pytest.raises(ValueError, match="init_process_group"):
        dl.train(_model(), F.cross_entropy, X, y, distributed=True, **KW)
    with pytest.raises(TypeError, match="distributed must be"):
        dl.train(_model(), F.cross_entropy, X, y, distributed="yes", **KW)
    a = dl.train(_model(), F.cross_entropy, X, y, distributed=False, **KW)
    b = dl.train(_model(), F.cross_entropy, X, y, **KW)
    assert torch.equal(a.theta, b.theta)


@pytest.mark.parametrize("m,world", [(0, 2), (1, 3), (7, 3), (24, 2), (25, 4)])
def test_shares_cover_the_batch(m, world):
    bounds = [share(m, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == m
    assert all(bounds[r][1] == bounds[r + 1][0] for r in range(world - 1))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_data_parallel_error_is_a_runtime_error():
    assert issubclass(DataParallelError, RuntimeError)
