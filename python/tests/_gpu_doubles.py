"""Runs Python code in a child process against stoke's GPU test doubles (tests/fake/):
NVML and the CUDA runtime are loaded once per process, so each scenario gets its own
interpreter. The doubles are named by $STOKE_TEST_FAKE_NVML and $STOKE_TEST_FAKE_CUDART (ctest
sets them), else found in $STOKE_FAKE_GPU_DIR (a build's tests/fake) or beside the
build the package was imported from; tests skip when there are none, as in a build
with STOKE_TESTS=OFF."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import stoke

PACKAGE_PARENT = Path(stoke.__file__).resolve().parents[1]  # <build>/python
BUILD = PACKAGE_PARENT.parent


def fake_dir():
    d = os.environ.get("STOKE_FAKE_GPU_DIR")
    return Path(d) if d else BUILD / "tests" / "fake"


def fake_libs():
    d = fake_dir()
    nvml = Path(os.environ.get("STOKE_TEST_FAKE_NVML") or d / "fake_nvml" / "libnvidia-ml.so.1")
    cudart = Path(os.environ.get("STOKE_TEST_FAKE_CUDART")
                  or d / "fake_cudart" / "libcudart.so.13")
    if not nvml.exists() or not cudart.exists():
        pytest.skip(f"the GPU test doubles are not built ({nvml}; build with STOKE_TESTS=ON "
                    "or set STOKE_FAKE_GPU_DIR to a build's tests/fake)")
    return nvml, cudart


def run(code, scenario=None, nvml=None, cudart=None, timeout=300):
    """Runs `code` in a fresh interpreter that imports stoke from the same build; the
    code prints one JSON document, which is returned."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(PACKAGE_PARENT)
    for k in ("STOKE_FAKE_GPU_SCENARIO", "STOKE_NVML_LIBRARY", "STOKE_CUDART_LIBRARY"):
        env.pop(k, None)
    if scenario is not None:
        env["STOKE_FAKE_GPU_SCENARIO"] = str(scenario)
    if nvml is not None:
        env["STOKE_NVML_LIBRARY"] = str(nvml)
    if cudart is not None:
        env["STOKE_CUDART_LIBRARY"] = str(cudart)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"child failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout)
