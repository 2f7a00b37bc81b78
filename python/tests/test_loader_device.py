"""The loader's CUDA path from Python, against the CUDA runtime double (tests/fake): no
GPU here, so this checks what stoke does with the device (compiled, not run on a GPU):
batches in device memory held while the ring goes on, DLPack's device and stream
protocol, and the memory coming back."""
import json
from pathlib import Path

import numpy as np
import pytest

import _gpu_doubles as doubles

SCENARIO = Path(__file__).resolve().parents[2] / "tests" / "scenarios" / "probe_h100.gpu"

CHILD = """
import ctypes, json, os, sys
import numpy as np
import stoke
from stoke import _stoke

fake = ctypes.CDLL(os.environ["STOKE_CUDART_LIBRARY"])
fake.fake_cudart_kind.argtypes = [ctypes.c_void_p]
x = np.random.default_rng(1).integers(0, 256, size=(300, 8, 8), dtype=np.uint8)
np.save(sys.argv[1] + "/x.npy", x)
np.save(sys.argv[1] + "/y.npy", np.arange(300, dtype=np.int64))
ds = stoke.Dataset(sys.argv[1] + "/x.npy")
core = _stoke.LoaderCore(ds._d, {"batch_size": 32, "shuffle": True, "seed": 3, "workers": 2,
                                 "prefetch": 2, "device": 0})
on_device, reason = core.device()
held = []
for _ in range(25):  # 2.5 epochs with a ring of 2: every buffer reused many times over
    r = core.next(samples=True)
    if r is not None:
        held.append(r)
stream = ctypes.c_void_p()
fake.cudaStreamCreateWithFlags(ctypes.byref(stream), 1)
kinds, devices, same, waits_before = set(), set(), 0, 0
for epoch, index, xs, ys, samples in held:
    kinds.add(fake.fake_cudart_kind(xs.ptr))
    devices.add(xs.__dlpack_device__())
    cap = xs.__dlpack__(stream=stream.value)  # the stream waits on the batch's copy
    del cap  # never consumed: the capsule frees its tensor
    # The double's device memory is host memory: read it back and compare with the file.
    n = len(samples)
    got = np.ctypeslib.as_array((ctypes.c_uint8 * (n * 64)).from_address(xs.ptr))
    same += np.array_equal(got.reshape(n, 8, 8), x[samples])
    lab = np.ctypeslib.as_array((ctypes.c_int64 * n).from_address(ys.ptr))
    same += np.array_equal(lab, np.array(samples))
op, st, ev, dst = ctypes.c_char(), ctypes.c_int(), ctypes.c_int(), ctypes.c_void_p()
waits = sum(1 for k in range(4096)
            if fake.fake_cudart_log(k, ctypes.byref(op), ctypes.byref(st), ctypes.byref(ev),
                                    ctypes.byref(dst)) and op.value == b"W")
stats_held = core.stats()["held"]
nheld = len(held)
del held, xs, ys, r  # the loop variables held the last batch too
after = core.stats()
core.close()
del core
fake.cudaStreamDestroy(stream)
print(json.dumps({"on_device": on_device, "reason": reason, "kinds": sorted(kinds),
                  "devices": sorted(devices), "batches": nheld, "same": same, "waits": waits,
                  "held": stats_held, "held_after": after["held"],
                  "live": fake.fake_cudart_live()}))
"""


def test_device_batches_held_and_streamed(tmp_path):
    _, cudart = doubles.fake_libs()
    r = doubles.run(CHILD.replace("sys.argv[1]", repr(str(tmp_path))), scenario=SCENARIO,
                    cudart=cudart)
    assert r["on_device"] and r["reason"] == ""
    assert r["kinds"] == [2]  # device memory
    assert r["devices"] == [[2, 0]]  # DLPack's kDLCUDA, device 0
    assert r["batches"] == 23  # 10 per epoch and 3 of the third
    assert r["same"] == 2 * 23  # every held batch (inputs and labels) intact
    assert r["waits"] >= 23  # one stream wait per __dlpack__(stream=...)
    assert r["held"] == 23 and r["held_after"] == 0
    assert r["live"] == 0  # pinned and device memory, streams and events all freed


def test_no_gpu_is_an_error_with_the_reason(tmp_path):
    """device="cuda" where the runtime finds no device: the reason, not a silent CPU."""
    import stoke
    x = np.zeros((10, 4), np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.zeros(10, np.int64))
    with pytest.raises(stoke.UnavailableError, match="cuda:1"):
        stoke.Loader(stoke.Dataset(tmp_path / "x.npy"), device="cuda:1")


REFUSED = """
import json, sys
import numpy as np
import stoke
np.save(sys.argv[1] + "/x.npy", np.zeros((10, 4), np.float32))
np.save(sys.argv[1] + "/y.npy", np.zeros(10, np.int64))
try:
    stoke.Loader(stoke.Dataset(sys.argv[1] + "/x.npy"), device="cuda")
    print(json.dumps({"error": None}))
except stoke.UnavailableError as e:
    print(json.dumps({"error": str(e)}))
"""


def test_no_driver_says_so(tmp_path):
    """The CUDA runtime without the NVIDIA driver (error 35, driver version 0): what is
    missing, not the runtime's "driver version is insufficient"."""
    _, cudart = doubles.fake_libs()
    r = doubles.run(REFUSED.replace("sys.argv[1]", repr(str(tmp_path))),
                    scenario=SCENARIO.parent / "cuda_nodriver.gpu", cudart=cudart)
    assert "no NVIDIA driver" in r["error"] and "libcuda.so.1 is not found" in r["error"]
    assert "insufficient" not in r["error"]


def test_runtime_that_is_a_fifo_is_refused(tmp_path):
    """STOKE_CUDART_LIBRARY naming a FIFO: refused by name, never opened (dlopen would
    wait for a writer forever: the child's timeout turns that into a failure)."""
    import os
    fifo = tmp_path / "libcudart.fifo"
    os.mkfifo(fifo)
    r = doubles.run(REFUSED.replace("sys.argv[1]", repr(str(tmp_path))), cudart=fifo,
                    timeout=60)
    assert f"STOKE_CUDART_LIBRARY={fifo}: is a FIFO (named pipe), not a regular file" in r["error"]
