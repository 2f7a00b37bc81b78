"""stoke.probe() and stoke.recommend(): what `stoke probe` reports, as Python objects
(docs/python.md, "probe() and recommend()")."""
import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import stoke

import _gpu_doubles as doubles

SCENARIOS = Path(__file__).resolve().parents[2] / "tests" / "scenarios"
# The command line beside the package in a build; scripts/check names it for a venv.
CLI = Path(os.environ.get("STOKE_TEST_CLI", doubles.BUILD / "stoke"))


def cli_probe(env=None):
    if not CLI.exists():
        pytest.skip(f"no stoke command beside the package ({CLI})")
    p = subprocess.run([str(CLI), "probe", "--json"], capture_output=True, text=True, env=env,
                       check=True)
    return json.loads(p.stdout)


def test_probe_shape():
    p = stoke.probe()
    assert set(p) >= {"stoke_version", "cpu", "openblas", "memory", "storage",
                      "driver_version", "cuda_driver_version", "cuda_runtime_version",
                      "gpus", "gpu_note"}
    cpu = p["cpu"]
    assert set(cpu) == {"model", "generation", "vendor", "family", "model_number",
                        "logical_cpus", "usable_cpus", "quota_cpus", "quota_file",
                        "available_cpus", "load", "physical_cores", "sockets", "numa_nodes",
                        "l1d_bytes", "l2_bytes", "l3_bytes", "simd", "max_mhz", "isa_cap",
                        "simd_hidden"}
    assert cpu["logical_cpus"] >= 1 and cpu["usable_cpus"] >= 1
    # affinity and a cgroup quota: the CPUs stoke may keep busy
    assert 1 <= cpu["available_cpus"] <= cpu["usable_cpus"]
    if cpu["quota_cpus"] is None:
        assert cpu["quota_file"] is None and cpu["available_cpus"] == cpu["usable_cpus"]
    else:
        assert cpu["quota_cpus"] > 0 and cpu["quota_file"]
        assert cpu["available_cpus"] == min(cpu["usable_cpus"], math.ceil(cpu["quota_cpus"]))
    # what other processes took over the probe's look (None if /proc/stat did not advance)
    if cpu["load"] is not None:
        assert set(cpu["load"]) == {"seconds", "busy_cpus", "own_cpus", "others_cpus",
                                    "steal_pct", "run_queue"}
        assert cpu["load"]["seconds"] > 0 and cpu["load"]["others_cpus"] >= 0
    assert all(isinstance(s, str) for s in cpu["simd"])
    assert isinstance(cpu["isa_cap"], str)
    mem = p["memory"]
    assert mem["total_bytes"] > 0
    assert mem["available_from"] in ("MemAvailable", "cgroup limit", None)
    if mem["available_from"] == "cgroup limit":
        assert mem["cgroup_limit_bytes"] and mem["available_bytes"] < mem["meminfo_available_bytes"]
    assert p["storage"] is None  # only with data=
    assert isinstance(p["gpus"], list)
    if not p["gpus"]:
        assert p["gpu_note"].startswith("no NVIDIA GPU")


def test_probe_says_what_stoke_probe_says():
    cli = cli_probe(env={k: v for k, v in os.environ.items() if not k.startswith("STOKE_FAKE")})
    p = stoke.probe()
    for k, v in cli["cpu"].items():
        if k in ("max_mhz", "quota_cpus") and v is not None:
            assert p["cpu"][k] == pytest.approx(v, rel=0.05), k
        elif k == "load":  # another look, another moment: the same readings
            assert p["cpu"][k] is None or set(p["cpu"][k]) == set(v)
        else:
            assert p["cpu"][k] == v, k
    for k, v in p["cpu"].items():
        if k not in cli["cpu"]:
            assert v in (None, [], "all"), k  # the JSON leaves unknown facts out
    assert p["memory"]["total_bytes"] == cli["memory"]["total_bytes"]
    assert p["memory"]["cgroup_limit_bytes"] == cli["memory"].get("cgroup_limit_bytes")
    if cli.get("openblas"):
        for k in ("core", "fit", "core_isa", "cpu_isa"):
            assert p["openblas"][k] == cli["openblas"].get(k), k
    assert len(p["gpus"]) == len(cli["gpus"])
    assert p["gpu_note"] == cli.get("gpu_note", "")
    recs = stoke.recommend()
    assert [(r["key"], r["device"]) for r in recs] == [
        (r["key"], r["device"] if r["device"] == "cpu" else r["gpu"])
        for r in cli["recommendations"]]
    for r, c in zip(recs, cli["recommendations"]):
        assert r["reason"] or not r["known"]
        if r["type"] == "flops":
            assert r["value"] == pytest.approx(c["value"], rel=0.05)
        else:
            assert r["value"] == c.get("value"), r["key"]
        assert r["unsure"] == c.get("unsure"), r["key"]


def test_recommend_types():
    recs = stoke.recommend()
    assert recs
    kinds = {"text": str, "bool": bool, "count": int, "flops": float}
    for r in recs:
        assert set(r) == {"key", "device", "type", "known", "value", "reason", "unsure"}
        # the rule's doubt (a trial settles it), only the precision's
        assert r["unsure"] is None or (r["key"] == "precision" and r["unsure"])
        assert r["device"] == "cpu" or isinstance(r["device"], int)
        if r["known"]:
            assert type(r["value"]) is kinds[r["type"]], r
        else:
            assert r["value"] is None and r["reason"]
    keys = {r["key"] for r in recs if r["device"] == "cpu"}
    assert {"loader_workers", "prefetch_depth"} <= keys


def test_probe_storage_under_a_path(tmp_path):
    p = stoke.probe(data=tmp_path)
    st = p["storage"]
    assert st["path"] == str(tmp_path)
    assert st["kind"] in ("unknown", "memory", "ssd", "rotational", "network", "overlay")
    assert st["mount_point"] and st["reason"]


def test_probe_missing_path_is_not_found(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(stoke.NotFoundError, match=str(missing)) as e:
        stoke.probe(data=missing)
    assert isinstance(e.value, FileNotFoundError)
    with pytest.raises(TypeError):
        stoke.probe(data=3)


PROBE = ("import json, stoke\n"
         "print(json.dumps({'probe': stoke.probe(), 'recs': stoke.recommend()}))\n")


def test_no_nvml_gives_the_reason():
    out = doubles.run(PROBE, nvml="/nonexistent/libnvidia-ml.so.1")
    assert out["probe"]["gpus"] == []
    assert out["probe"]["gpu_note"].startswith("no NVIDIA GPU")
    assert "/nonexistent/libnvidia-ml.so.1" in out["probe"]["gpu_note"]
    assert all(r["device"] == "cpu" for r in out["recs"])


def test_fake_driver_not_loaded():
    nvml, cudart = doubles.fake_libs()
    out = doubles.run(PROBE, scenario=SCENARIOS / "probe_nodriver.gpu", nvml=nvml, cudart=cudart)
    assert out["probe"]["gpus"] == []
    assert "Driver Not Loaded" in out["probe"]["gpu_note"]


def test_fake_h100():
    nvml, cudart = doubles.fake_libs()
    out = doubles.run(PROBE, scenario=SCENARIOS / "probe_h100.gpu", nvml=nvml, cudart=cudart)
    p = out["probe"]
    assert p["driver_version"] == "550.54.15"
    assert p["cuda_driver_version"] == "12.4" and p["cuda_runtime_version"] == "12.4"
    assert p["gpu_note"] == ""
    (g,) = p["gpus"]
    assert g["index"] == 0 and g["name"] == "NVIDIA H100 PCIe"
    assert g["uuid"] == "GPU-9a1b2c3d-h100"
    assert g["memory_total_bytes"] == 85520809984
    assert g["compute_capability"] == "9.0" and g["sm_count"] == 114
    assert g["power_limit_mw"] == 350000 and g["max_sm_clock_mhz"] == 1755
    assert g["pcie_gen"] == 5 and g["pcie_width"] == 16
    # whether stoke train's CUDA backend runs there (tests/e2e/train_cuda.sh checks the
    # verdicts): a bool and the reason or what it runs with
    assert isinstance(g["cuda_backend"]["ready"], bool) and g["cuda_backend"]["detail"]
    gpu_recs = {r["key"]: r for r in out["recs"] if r["device"] == 0}
    assert gpu_recs["precision"]["value"] == "bf16"
    assert gpu_recs["tf32"]["value"] is True
    assert gpu_recs["peak_bf16_flops"]["type"] == "flops"
    assert gpu_recs["peak_bf16_flops"]["value"] == pytest.approx(819.5e12, rel=1e-3)


def test_fake_gpu_without_power_limit_or_pcie():
    nvml, cudart = doubles.fake_libs()
    out = doubles.run(PROBE, scenario=SCENARIOS / "probe_mixed.gpu", nvml=nvml, cudart=cudart)
    a, b = out["probe"]["gpus"]
    assert a["name"] == "NVIDIA GeForce RTX 3090" and a["pcie_gen"] == 4
    assert b["name"] == "Tesla V100-PCIE-16GB"
    assert b["power_limit_mw"] is None and b["pcie_gen"] is None and b["pcie_width"] is None
    assert b["compute_capability"] == "7.0"
    assert {r["device"] for r in out["recs"]} == {"cpu", 0, 1}
