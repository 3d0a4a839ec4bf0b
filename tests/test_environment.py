"""The pinned environments agree: requirements.txt (pip, CI) and environment.yml
(Binder) name the same packages at the same versions, and pyproject's ranges admit them."""
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _pins(lines):
    """``{canonical name: Version}`` from requirement lines; skips options and ``-e .``."""
    pins = {}
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        req = Requirement(line)
        specs = list(req.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"not an exact pin: {line!r}"
        # torch==2.13.0+cpu (Binder, PyTorch's CPU index) is the same release as torch==2.13.0
        version = Version(specs[0].version)
        pins[canonicalize_name(req.name)] = Version(version.public)
    return pins


@pytest.fixture(scope="module")
def requirements():
    return _pins((ROOT / "requirements.txt").read_text().splitlines())


@pytest.fixture(scope="module")
def environment():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pip_sections) == 1, "environment.yml must have one pip: section"
    return env, _pins(pip_sections[0])


def test_same_packages_and_versions(requirements, environment):
    _, env_pins = environment
    only_req = sorted(set(requirements) - set(env_pins))
    only_env = sorted(set(env_pins) - set(requirements))
    assert not only_req and not only_env, (
        f"only in requirements.txt: {only_req}; only in environment.yml: {only_env}")
    differ = {k: (str(requirements[k]), str(env_pins[k]))
              for k in requirements if requirements[k] != env_pins[k]}
    assert not differ, f"versions differ (requirements.txt, environment.yml): {differ}"


def test_environment_installs_the_package_and_python_311(environment):
    env, _ = environment
    text = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s*-\s*-e\s+\.\s*$", text, re.M), "environment.yml must pip-install -e ."
    assert "python=3.11" in [d for d in env["dependencies"] if isinstance(d, str)]


def test_binder_gets_cpu_torch():
    text = (ROOT / "environment.yml").read_text()
    assert "download.pytorch.org/whl/cpu" in text
    assert re.search(r"torch==[\d.]+\+cpu", text)


def test_pyproject_ranges_admit_the_pins(requirements):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        declared += extra
    problems = []
    for spec in declared:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        if name == canonicalize_name(project["name"]):      # an extra that pulls another extra ([lab])
            continue
        if name not in requirements:
            problems.append(f"{req.name} is in pyproject.toml but not pinned in requirements.txt")
        elif not req.specifier.contains(requirements[name], prereleases=True):
            problems.append(f"{spec!r} does not admit the pinned {name}=={requirements[name]}")
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- the library as a dependency (issue #32, item 9)
BOOK_ONLY = ("plotly", "ipywidgets", "cvxpy", "ot", "sklearn")


def test_core_needs_none_of_the_book_extras():
    """A user who wants the accountants, the algorithms or the CLI installs none of the [lab] extra:
    the core imports and answers with those packages made unimportable."""
    import subprocess
    import sys

    code = f"""
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split('.')[0] in {BOOK_ONLY!r}:
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
import torch, dpclip_lab as dl
from dpclip_lab import cli
assert 0.9 < dl.get_epsilon(noise_multiplier=1.1, sample_rate=0.01, steps=100, delta=1e-5) < 1.0
r = dl.dp_sgd(lambda th, idx: torch.ones((idx.numel(), 2), dtype=th.dtype), torch.zeros(2, dtype=torch.float64),
              n=10, steps=3, lr=0.1, clip_norm=1.0, noise_multiplier=1.0, batch_size=5, seed=0, progress=False)
assert cli.main(["epsilon", "-z", "1.1", "-q", "0.01", "-T", "100", "-d", "1e-5"]) in (None, 0)
loaded = sorted(m for m in sys.modules if m.split('.')[0] in {BOOK_ONLY!r})
assert not loaded, loaded
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_default_setup_gets_cpu_torch():
    """The README's set-up command installs PyTorch's CPU build on an ordinary machine (issue #32, item 8):
    the pinned release from PyTorch's CPU index unless pip finds it without any index; TORCH_INDEX switches."""
    import subprocess

    def dry_run(*args):
        proc = subprocess.run(["make", "-n", "-B", "venv", *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    torch_pin = re.search(r"^torch==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    out = dry_run()
    assert f'--no-index --no-deps "torch=={torch_pin}"' in out
    assert f'"torch=={torch_pin}" --index-url https://download.pytorch.org/whl/cpu' in out
    assert "download.pytorch.org/whl/cu128" in dry_run("TORCH_INDEX=https://download.pytorch.org/whl/cu128")


def test_package_metadata_for_library_users():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert project["license"] == "MIT" and "LICENSE" in project["license-files"]   # SPDX string, not a table
    core = [Requirement(s) for s in project["dependencies"]]
    assert not any(sp.operator == "==" for r in core for sp in r.specifier), "exact pins belong in requirements.txt"
    names = {canonicalize_name(r.name) for r in core}
    assert not names & {"plotly", "ipywidgets", "cvxpy", "pot", "scikit-learn"}, names
    lab = {canonicalize_name(Requirement(s).name) for s in project["optional-dependencies"]["lab"]}
    assert {"plotly", "ipywidgets", "cvxpy", "pot", "scikit-learn"} <= lab
    ignored = (ROOT / ".gitignore").read_text().split()
    assert "build/" in ignored and "dist/" in ignored


# --------------------------------------------------------------------------- jupyterlab-myst (issue #10, items 2 and 13)

def test_jupyterlab_myst_is_pinned_for_binder_and_pip(requirements, environment):
    assert "jupyterlab-myst" in requirements and "jupyterlab-myst" in environment[1]


def test_jupyterlab_myst_extension_is_installed_enabled_and_compatible():
    """Readers who open a chapter in JupyterLab see its MyST (admonitions, theorems, math) rendered:
    the ``jupyterlab-myst`` lab extension is installed, enabled, and *compatible* with the
    installed JupyterLab. ``jupyter labextension list`` marks an extension whose shared
    dependencies JupyterLab cannot satisfy with ``X``: installed and enabled, but never loaded
    (e.g. jupyterlab-myst 2.7.0, built against ``@jupyter/ydoc`` 3, on JupyterLab 4.6, which
    ships ``@jupyter/ydoc`` 4)."""
    import shutil
    import subprocess
    import sys

    jupyter = Path(sys.executable).with_name("jupyter")
    cmd = [str(jupyter) if jupyter.exists() else (shutil.which("jupyter") or "jupyter"), "labextension", "list"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    out = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)     # no colours
    line = next((ln for ln in out.splitlines() if re.match(r"\s*jupyterlab-myst\s+v", ln)), None)
    assert line is not None, f"the jupyterlab-myst lab extension is not installed:\n{out[-2000:]}"
    assert re.search(r"\benabled\b", line), f"jupyterlab-myst is installed but disabled: {line.strip()}"
    assert re.search(r"\bOK\b", line), (
        f"jupyterlab-myst is enabled but JupyterLab will not load it: {line.strip()}\n"
        + "\n".join(ln for ln in out.splitlines() if "compatible" in ln or "@jupyter" in ln or "Conflicting" in ln))


# --------------------------------------------------------------------------- outputs never committed (issue #32, item 6)
def test_notebooks_are_committed_through_the_output_filter(tmp_path):
    """``.gitattributes`` sends notebooks through tools/strip_outputs.py, make registers it, the filter
    clears an executed notebook's outputs, and every committed notebook passes through it unchanged."""
    import subprocess
    import sys

    import nbformat

    assert re.search(r"^\*\.ipynb\s+filter=strip-outputs\s*$", (ROOT / ".gitattributes").read_text(), re.M)
    dry = subprocess.run(["make", "-n", "-B", "venv"], capture_output=True, text=True, cwd=ROOT, timeout=60).stdout
    assert 'git config filter.strip-outputs.clean ".venv/bin/python tools/strip_outputs.py"' in dry

    def strip(text):
        proc = subprocess.run([sys.executable, str(ROOT / "tools" / "strip_outputs.py")], input=text,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# t"), nbformat.v4.new_code_cell("1 + 1")])
    nb.cells[1].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=3)]
    nb.cells[1].execution_count = 3
    clean = nbformat.reads(strip(nbformat.writes(nb)), as_version=4)
    assert clean.cells[1].outputs == [] and clean.cells[1].execution_count is None
    assert clean.cells[1].source == "1 + 1" and clean.cells[0].source == "# t"
    # the committed blobs (HEAD), not the working copies a reader may have run
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD", "--", "book"], capture_output=True,
                            text=True, cwd=ROOT, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no committed notebooks to check")
    for rel in (p for p in listed.stdout.split() if p.endswith(".ipynb")):
        text = subprocess.run(["git", "show", f"HEAD:{rel}"], capture_output=True, text=True, cwd=ROOT,
                              timeout=60).stdout
        assert strip(text) == text, f"{rel} is not a fixed point of the output filter"
