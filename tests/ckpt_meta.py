#!/usr/bin/python3
"""ckpt_meta.py - edits a safetensors file's __metadata__ as a hostile or careless user
could (standard library only), for the tests of what a reader makes of it.

  ckpt_meta.py set FILE KEY VALUE   sets metadata KEY to the string VALUE
  ckpt_meta.py del FILE KEY         removes KEY
  ckpt_meta.py get FILE KEY         prints KEY's value (exit 1 if absent)
The header is rewritten with the same tensors and data; padded to 8 bytes."""
import json
import struct
import sys


def main():
    op, path, key = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    meta = header.setdefault("__metadata__", {})
    if op == "get":
        if key not in meta:
            return 1
        print(meta[key])
        return 0
    if op == "set":
        meta[key] = sys.argv[4]
    elif op == "del":
        meta.pop(key, None)
    else:
        print("ckpt_meta.py: unknown operation " + op, file=sys.stderr)
        return 2
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + blob[8 + n:])
    return 0


sys.exit(main())
