"""``dpclip-lab``: the privacy calculator on the command line.

The two questions a DP-SGD user asks, with the names Opacus and TF Privacy use::

    dpclip-lab epsilon --noise-multiplier 1.1 --sample-rate 0.004267 --steps 14062 --delta 1e-5
    dpclip-lab noise --target-epsilon 3 --delta 1e-5 --sample-rate 0.004267 --epochs 60

Both count ``T`` steps of the Poisson-subsampled Gaussian mechanism (DP-SGD: noise of
standard deviation ``z·C`` added to the sum of the gradients clipped to ``C``,
add/remove-one neighbours), as :func:`dpclip_lab.get_epsilon` and
:func:`dpclip_lab.get_noise_multiplier` do.

* ``--sample-rate q`` or ``--batch-size B --dataset-size N`` (``q = B / N``);
* ``--steps T`` or ``--epochs E`` (``T = ceil(E / q)``: rounding up never
  under-counts the steps, so it never under-reports ε);
* ``--accountant rdp`` (Rényi DP with the improved conversion; fast, an upper bound),
  ``pld`` (privacy-loss distribution; tight, an upper bound) or ``both``
  (``epsilon``: both numbers; ``noise``: the larger of the two noise multipliers,
  so that each accountant certifies the target).

Bad input exits with status 2 and a message naming the option and its valid range.
``--json`` prints one JSON object instead of text. Run as ``dpclip-lab`` (console
script) or ``python -m dpclip_lab``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Sequence

__all__ = ["main", "build_parser", "resolve_sample_rate", "resolve_steps"]

ACCOUNTANT_CHOICES = ("rdp", "pld", "both")
_ACCOUNTANT_NAMES = {"rdp": "RDP (Mironov et al. 2019, improved conversion)",
                     "pld": "PLD (privacy-loss distribution, tight)"}


class _Parser(argparse.ArgumentParser):
    """argparse, with the program name in every error (``dpclip-lab epsilon: error: ...``)."""


def _float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(value)


def _common(p: argparse.ArgumentParser) -> None:
    rate = p.add_argument_group("sampling (give --sample-rate, or --batch-size and --dataset-size)")
    rate.add_argument("--sample-rate", "-q", type=_float, metavar="Q",
                      help="Poisson sampling probability q in (0, 1] (expected batch size / dataset size)")
    rate.add_argument("--batch-size", type=_int, metavar="B", help="expected batch size B >= 1")
    rate.add_argument("--dataset-size", type=_int, metavar="N", help="number of examples N >= B")
    length = p.add_argument_group("length of training (give one)")
    steps = length.add_mutually_exclusive_group(required=True)
    steps.add_argument("--steps", "-T", type=_int, metavar="T", help="number of steps T")
    steps.add_argument("--epochs", "-E", type=_float, metavar="E",
                       help="number of epochs E > 0; steps T = ceil(E / q)")
    p.add_argument("--accountant", "-a", choices=ACCOUNTANT_CHOICES, default="rdp",
                   help="rdp (default), pld (tight), or both")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser() -> argparse.ArgumentParser:
    """Lab utility: The ``dpclip-lab`` argument parser (sub-commands ``epsilon`` and ``noise``)."""
    from . import __version__

    parser = _Parser(prog="dpclip-lab", description=__doc__.split("\n\n")[0].replace("``", ""),  # no reST in --help
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog="Examples:\n"
                            "  dpclip-lab epsilon --noise-multiplier 1.1 --sample-rate 0.004267 "
                            "--steps 14062 --delta 1e-5\n"
                            "  dpclip-lab noise --target-epsilon 3 --delta 1e-5 --sample-rate 0.004267 "
                            "--epochs 60 --accountant both")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{epsilon,noise}", required=True)
    eps = sub.add_parser("epsilon", help="ε after T steps of DP-SGD at noise multiplier z",
                         description="ε (an upper bound) after T steps of DP-SGD at noise multiplier z.")
    eps.add_argument("--noise-multiplier", "-z", type=_float, required=True, metavar="Z",
                     help="noise std / clipping norm, z > 0")
    eps.add_argument("--delta", "-d", type=_float, required=True, metavar="DELTA", help="δ in (0, 1)")
    _common(eps)
    noise = sub.add_parser("noise", help="smallest noise multiplier z that reaches a target ε",
                           description="Smallest noise multiplier z whose ε is at most the target.")
    noise.add_argument("--target-epsilon", "-e", type=_float, required=True, metavar="EPS",
                       help="target ε > 0")
    noise.add_argument("--delta", "-d", type=_float, required=True, metavar="DELTA", help="δ in (0, 1)")
    noise.add_argument("--tolerance", type=_float, default=0.01, metavar="TOL",
                       help="stop when target − TOL <= ε(z) <= target (default 0.01)")
    _common(noise)
    return parser


def resolve_sample_rate(sample_rate=None, batch_size=None, dataset_size=None) -> float:
    """Lab utility: ``q`` from ``sample_rate``, or from ``batch_size / dataset_size`` (exactly one way)."""
    if sample_rate is not None:
        if batch_size is not None or dataset_size is not None:
            raise ValueError("give either --sample-rate or --batch-size with --dataset-size, not both")
        if not 0 < sample_rate <= 1:
            raise ValueError(f"--sample-rate must lie in (0, 1], got {sample_rate!r}")
        return float(sample_rate)
    if batch_size is None or dataset_size is None:
        raise ValueError("give --sample-rate, or both --batch-size and --dataset-size")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be an integer >= 1, got {batch_size!r}")
    if dataset_size < batch_size:
        raise ValueError(f"--dataset-size must be an integer >= --batch-size ({batch_size}), "
                         f"got {dataset_size!r}")
    return batch_size / dataset_size


def resolve_steps(steps=None, epochs=None, sample_rate=1.0) -> int:
    """Lab utility: ``T`` from ``steps``, or ``ceil(epochs / sample_rate)`` (rounded up: never fewer steps)."""
    if steps is not None:
        if steps < 1:
            raise ValueError(f"--steps must be an integer >= 1, got {steps!r}")
        return int(steps)
    if epochs is None:
        raise ValueError("give --steps or --epochs")
    if not epochs > 0:
        raise ValueError(f"--epochs must be > 0, got {epochs!r}")
    # a tiny relative slack so that 60 epochs at q = 1/250 gives 15000 steps, not 15001
    return max(1, math.ceil(epochs / sample_rate * (1 - 1e-12)))


def _check_delta(delta: float) -> None:
    if not 0 < delta < 1:
        raise ValueError(f"--delta must lie in (0, 1), got {delta!r}")


def _accountants(choice: str) -> list[str]:
    return ["rdp", "pld"] if choice == "both" else [choice]


def _run_epsilon(args) -> dict:
    from .accountants import get_epsilon

    if not args.noise_multiplier > 0:
        raise ValueError(f"--noise-multiplier must be > 0, got {args.noise_multiplier!r}")
    _check_delta(args.delta)
    q = resolve_sample_rate(args.sample_rate, args.batch_size, args.dataset_size)
    steps = resolve_steps(args.steps, args.epochs, q)
    eps = {name: get_epsilon(noise_multiplier=args.noise_multiplier, sample_rate=q, steps=steps,
                             delta=args.delta, accountant=name)
           for name in _accountants(args.accountant)}
    return {"command": "epsilon", "noise_multiplier": args.noise_multiplier, "sample_rate": q,
            **_length(args, steps, q), "delta": args.delta, "epsilon": eps}


def _run_noise(args) -> dict:
    from .accountants import get_epsilon, get_noise_multiplier

    if not args.target_epsilon > 0:
        raise ValueError(f"--target-epsilon must be > 0, got {args.target_epsilon!r}")
    if not args.tolerance > 0:
        raise ValueError(f"--tolerance must be > 0, got {args.tolerance!r}")
    _check_delta(args.delta)
    q = resolve_sample_rate(args.sample_rate, args.batch_size, args.dataset_size)
    steps = resolve_steps(args.steps, args.epochs, q)
    z = {name: get_noise_multiplier(target_epsilon=args.target_epsilon, target_delta=args.delta,
                                    sample_rate=q, steps=steps, accountant=name,
                                    epsilon_tolerance=args.tolerance)
         for name in _accountants(args.accountant)}
    chosen = max(z.values())
    # every accountant asked certifies the target at the returned z
    achieved = {name: get_epsilon(noise_multiplier=chosen, sample_rate=q, steps=steps,
                                  delta=args.delta, accountant=name) for name in z}
    return {"command": "noise", "target_epsilon": args.target_epsilon, "sample_rate": q,
            **_length(args, steps, q), "delta": args.delta, "noise_multiplier": chosen,
            "noise_multiplier_by_accountant": z, "epsilon_at_noise_multiplier": achieved}


def _length(args, steps: int, q: float) -> dict:
    """The length of training as the user gave it: ``--steps`` (epochs = T q), or ``--epochs`` echoed as
    given, with the steps it became (``ceil(E / q)``: rounding up never under-counts, so never under-reports ε)."""
    if args.epochs is None:
        return {"steps": steps, "epochs": steps * q}
    return {"steps": steps, "epochs": args.epochs, "steps_from_epochs": "ceil(epochs / sample_rate)"}


def _json_safe(value):
    """JSON has no infinity or NaN: a non-finite number is written as the string "inf", "-inf" or "nan"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def _text(result: dict) -> str:
    given = "steps_from_epochs" in result
    head = (f"sample rate q = {result['sample_rate']:.6g}, steps T = {result['steps']} "
            f"({result['epochs']:.6g} epochs{', steps rounded up' if given else ''}), "
            f"delta = {result['delta']:.3g}")
    if result["command"] == "epsilon":
        lines = [f"DP-SGD with noise multiplier z = {result['noise_multiplier']:.6g}", head]
        for name, eps in result["epsilon"].items():
            lines.append(f"epsilon = {eps:.4f}   [{_ACCOUNTANT_NAMES[name]}]")
    else:
        lines = [f"Noise for target epsilon = {result['target_epsilon']:.6g}", head,
                 f"noise multiplier z = {result['noise_multiplier']:.4f}"]
        for name, z in result["noise_multiplier_by_accountant"].items():
            lines.append(f"  {name}: smallest z = {z:.4f}, epsilon at the z above = "
                         f"{result['epsilon_at_noise_multiplier'][name]:.4f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Lab utility: Entry point of the ``dpclip-lab`` console script; returns the exit status.

    Warnings of the computation (e.g. the PLD accountant reporting its RDP fallback) are
    printed once each, after the result, as ``dpclip-lab <command>: warning: ...`` on stderr.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    sub = parser._subparsers._group_actions[0].choices[args.command]  # for errors with its prog name
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = _run_epsilon(args) if args.command == "epsilon" else _run_noise(args)
        except (ValueError, TypeError) as err:
            sub.error(str(err))   # exits with status 2
    print(json.dumps(_json_safe(result), indent=2, allow_nan=False) if args.json else _text(result))
    for message in dict.fromkeys(str(w.message) for w in caught):   # each once, in order
        print(f"{sub.prog}: warning: {message}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
