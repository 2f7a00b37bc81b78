"""The README's Python example, extracted and run as written, and what a newcomer
checks first about the package (its version)."""
import os
import re
import subprocess
import sys

import pytest

import stoke

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_example():
    """The python block of the README's "From a PyTorch script"."""
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index("From a PyTorch script"):]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, "the README lost its Python example"
    return m.group(1)


def test_readme_example_runs_to_a_diagnosis(fashion, tmp_path):
    try:
        import torch  # noqa: F401 (the example's batches are torch tensors)
    except ImportError:
        pytest.skip("torch is missing (Debian's python3-torch): the README example needs it")
    code = readme_example()
    assert fashion in code  # the example reads the dataset the fixture checked
    # run where its run.jsonl may be written, with the package under test
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(stoke.__file__)))
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    diagnosis = [l for l in r.stdout.splitlines() if l.startswith("diagnosis: ")]
    assert diagnosis, r.stdout
    # a loop shorter than the monitor's interval is still judged
    assert "too few samples" not in r.stdout, r.stdout
    assert (tmp_path / "run.jsonl").stat().st_size > 0


def test_version_is_the_projects():
    cmake = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    version = re.search(r"project\(stoke VERSION ([0-9.]+)", cmake).group(1)
    assert stoke.__version__ == version
    # pyproject.toml reads it from there rather than keeping its own copy
    pyproject = open(os.path.join(ROOT, "pyproject.toml")).read()
    assert re.search(r'^dynamic = \["version"\]', pyproject, re.M), pyproject
    assert not re.search(r"^version\s*=", pyproject, re.M)
