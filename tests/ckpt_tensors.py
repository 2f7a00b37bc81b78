#!/usr/bin/python3
"""ckpt_tensors.py A B [TOLERANCE] - whether two checkpoints (safetensors) hold the same
tensors (the metadata, which names each file's own path and config, aside): bit for
bit, or with TOLERANCE within that absolute difference in every float32 value.
Standard library only. Prints each tensor that differs with its largest difference and
whether all are bit for bit; exit 0 when all are equal (within the tolerance), 1 when
any differs more or is missing, 2 on an unreadable file."""
import array
import json
import struct
import sys


def tensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    base = 8 + n
    return {k: (v["dtype"], blob[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def main():
    try:
        a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
    except (OSError, ValueError, KeyError, struct.error) as e:
        print(f"unreadable: {e}")
        return 2
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    bad = differ = 0
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b:
            print(f"{k}: only in {'the first' if k in a else 'the second'}")
            bad += 1
        elif a[k] != b[k]:
            differ += 1
            if a[k][0] == "F32" and b[k][0] == "F32":
                x, y = array.array("f", a[k][1]), array.array("f", b[k][1])
                d = max(abs(p - q) for p, q in zip(x, y)) if len(x) == len(y) else float("inf")
                print(f"{k}: differs, largest difference {d:.3g}")
                bad += not d <= tol
            else:
                print(f"{k}: differs")
                bad += 1
    print(f"{len(a)} tensors, {differ} differ" + (" (bit for bit)" if not differ else "") +
          (f", {bad} by more than {tol:g}" if tol else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
