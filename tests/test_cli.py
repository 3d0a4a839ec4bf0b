"""The privacy calculator on the command line (``dpclip-lab``, ``dpclip_lab/cli.py``)."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

import dpclip_lab as dl
from dpclip_lab import cli

ABADI = ["--noise-multiplier", "1.1", "--sample-rate", "0.004267", "--steps", "14062", "--delta", "1e-5"]


def _run(argv, capsys):
    assert cli.main(argv) == 0
    return capsys.readouterr().out


def _json(argv, capsys):
    return json.loads(_run(argv + ["--json"], capsys))


def test_epsilon_is_the_labs_get_epsilon(capsys):
    out = _json(["epsilon", *ABADI, "--accountant", "both"], capsys)
    for name in ("rdp", "pld"):
        expected = dl.get_epsilon(noise_multiplier=1.1, sample_rate=0.004267, steps=14062, delta=1e-5,
                                  accountant=name)
        assert out["epsilon"][name] == pytest.approx(expected, rel=1e-12)
    # the tight accountant is never above the RDP bound (both are upper bounds on the truth)
    assert out["epsilon"]["pld"] <= out["epsilon"]["rdp"]
    assert out["steps"] == 14062


def test_epsilon_text_output(capsys):
    text = _run(["epsilon", *ABADI], capsys)
    eps = dl.get_epsilon(noise_multiplier=1.1, sample_rate=0.004267, steps=14062, delta=1e-5)
    assert f"epsilon = {eps:.4f}" in text and "RDP" in text and "PLD" not in text


def test_epochs_round_steps_up_and_batch_size_gives_the_rate(capsys):
    out = _json(["epsilon", "-z", "1.0", "--batch-size", "256", "--dataset-size", "60000",
                 "--epochs", "3", "-d", "1e-5"], capsys)
    q = 256 / 60000
    assert out["sample_rate"] == pytest.approx(q)
    assert out["steps"] == math.ceil(3 / q) and out["steps"] * q >= 3
    assert cli.resolve_steps(epochs=60, sample_rate=1 / 250) == 15000   # no float off-by-one


def test_noise_reaches_the_target_with_every_accountant(capsys):
    out = _json(["noise", "--target-epsilon", "3", "--delta", "1e-5", "--sample-rate", "0.01",
                 "--steps", "1000", "--accountant", "both"], capsys)
    z = out["noise_multiplier"]
    assert z == max(out["noise_multiplier_by_accountant"].values())
    for name in ("rdp", "pld"):
        eps = dl.get_epsilon(noise_multiplier=z, sample_rate=0.01, steps=1000, delta=1e-5, accountant=name)
        assert eps <= 3.0
    # and it is the smallest such z for the accountant that set it, to the tolerance
    assert dl.get_epsilon(noise_multiplier=z, sample_rate=0.01, steps=1000, delta=1e-5,
                          accountant="rdp") > 3.0 - 0.011


@pytest.mark.parametrize("argv, message", [
    (["epsilon", "-z", "0", "-q", "0.1", "--steps", "10", "-d", "1e-5"], "--noise-multiplier must be > 0"),
    (["epsilon", "-z", "1", "-q", "1.5", "--steps", "10", "-d", "1e-5"], "--sample-rate must lie in (0, 1]"),
    (["epsilon", "-z", "1", "-q", "0.1", "--steps", "10", "-d", "1"], "--delta must lie in (0, 1)"),
    (["epsilon", "-z", "1", "-q", "0.1", "--steps", "0", "-d", "1e-5"], "--steps must be an integer >= 1"),
    (["epsilon", "-z", "1", "-q", "0.1", "--steps", "2.5", "-d", "1e-5"], "expected an integer"),
    (["epsilon", "-z", "abc", "-q", "0.1", "--steps", "3", "-d", "1e-5"], "expected a number"),
    (["epsilon", "-z", "1", "--steps", "3", "-d", "1e-5"], "give --sample-rate"),
    (["epsilon", "-z", "1", "-q", "0.1", "--batch-size", "3", "--steps", "3", "-d", "1e-5"], "not both"),
    (["epsilon", "-z", "1", "--batch-size", "30", "--dataset-size", "3", "--steps", "3", "-d", "1e-5"],
     "--dataset-size must be an integer >= --batch-size"),
    (["epsilon", "-z", "1", "-q", "0.1", "-d", "1e-5"], "one of the arguments --steps/-T --epochs/-E is required"),
    (["epsilon", "-z", "1", "-q", "0.1", "--steps", "3", "--epochs", "2", "-d", "1e-5"], "not allowed with"),
    (["epsilon", "-z", "1", "-q", "0.1", "--steps", "3", "-d", "1e-5", "-a", "moments"], "invalid choice"),
    (["noise", "-e", "-1", "-q", "0.1", "--steps", "3", "-d", "1e-5"], "--target-epsilon must be > 0"),
    (["noise", "-e", "1e-6", "-q", "1", "--steps", "3", "-d", "1e-12"], "unreachable"),
])
def test_bad_input_exits_2_naming_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "dpclip-lab" in err, err


def test_module_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "dpclip_lab.cli", "epsilon", *ABADI, "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["epsilon"]["rdp"] > 0
    proc = subprocess.run([sys.executable, "-m", "dpclip_lab", "noise", "-e", "1", "-d", "1e-5"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "required" in proc.stderr


# -- issue #32 item 10: version, help, what --json echoes -----------------------------------------------
def test_version_and_plain_help():
    for argv in (["--version"], ["--help"]):
        proc = subprocess.run([sys.executable, "-m", "dpclip_lab", *argv], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr
        if argv == ["--version"]:
            assert proc.stdout.strip() == f"dpclip-lab {dl.__version__}"
        else:
            assert "``" not in proc.stdout and "dpclip-lab: the privacy calculator" in proc.stdout


def test_json_echoes_the_epochs_given_and_the_steps_they_became(capsys):
    out = _json(["noise", "-e", "3", "-d", "1e-5", "--batch-size", "256", "--dataset-size", "60000",
                 "--epochs", "60"], capsys)
    assert out["epochs"] == 60 and out["steps"] == math.ceil(60 / (256 / 60000)) == 14063
    assert out["steps_from_epochs"] == "ceil(epochs / sample_rate)"
    # a rate rounded to 0.004267 is slightly larger: 14062 steps (the README's example)
    assert _json(["epsilon", "-z", "1.1", "-q", "0.004267", "--epochs", "60", "-d", "1e-5"], capsys)["steps"] == 14062
    text = _run(["epsilon", "-z", "1.1", "-q", "0.004267", "--epochs", "60", "-d", "1e-5"], capsys)
    assert "(60 epochs, steps rounded up)" in text


def test_json_is_standard_json_for_infinite_epsilon(capsys):
    """JSON has no Infinity: a non-finite number is written as a string."""
    assert cli._json_safe({"a": math.inf, "b": {"c": -math.inf, "d": 1.5}}) == {"a": "inf", "b": {"c": "-inf", "d": 1.5}}
    text = _run(["epsilon", "-z", "1e-200", "-q", "1", "-T", "1", "-d", "1e-5", "--json"], capsys)
    assert "Infinity" not in text and "NaN" not in text
    json.loads(text)
