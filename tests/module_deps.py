"""module_deps.py SRC_ROOT - the wall between modules (docs/architecture.md): which
modules each module may reach through its #include "..." lines (and that the Python
extension uses the public headers only),
public headers followed transitively, and that no private header (anything outside
include/stoke/) is included from another module except core's, which every module
shares. Fails naming the file and the include that crosses."""
import os
import re
import sys

root = sys.argv[1]
# Modules each may depend on (itself included). core depends on nothing; nn does not
# see data, so a model can be built without a dataset; data may feed a monitor (the
# loader's readings), never the reverse. dist (data parallel) reduces a model's gradients
# through nn's reducer seam (stoke_grad_reducer); the trainer drives it, nn never sees it.
ALLOWED = {
    "core": {"core"},
    "hw": {"core", "hw"},
    "data": {"core", "hw", "data", "monitor"},
    "nn": {"core", "hw", "nn"},  # the CUDA backend: hw's CUDA runtime table
    "monitor": {"core", "hw", "monitor"},
    "tune": {"core", "hw", "nn", "tune"},
    "dist": {"core", "hw", "nn", "dist"},  # hw: stoke/nn.h includes stoke/hw.h
    "train": {"core", "hw", "data", "monitor", "nn", "tune", "dist", "train"},
    "report": {"core", "report"},  # reads the logs' JSON; no other module's code
    "cli": {"core", "hw", "data", "monitor", "nn", "tune", "dist", "train", "report", "cli"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def includes(path):
    with open(path, encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def public_closure(header, seen):
    """Modules reached from include/stoke/<header>, following its own includes."""
    if header in seen:
        return set()
    seen.add(header)
    mods = {header[len("stoke/"):-len(".h")]}
    for inc in includes(os.path.join(root, "include", header)):
        if inc.startswith("stoke/"):
            mods |= public_closure(inc, seen)
    return mods


errors = []
for mod, allowed in ALLOWED.items():
    for dirpath, _, names in os.walk(os.path.join(root, "src", mod)):
        for name in sorted(names):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            for inc in includes(path):
                if inc.startswith("stoke/"):
                    reached = public_closure(inc, set())
                else:
                    top = inc.split("/")[0]
                    if top not in (mod, "core"):
                        errors.append(f"{rel}: includes {inc}, a private header of {top}")
                    reached = {top}
                bad = reached - allowed
                if bad:
                    errors.append(f"{rel}: includes {inc}, which reaches {', '.join(sorted(bad))}"
                                  f" ({mod} may depend on {', '.join(sorted(allowed))})")
# The Python extension (python/ext) is a user of the library like cli: public headers
# only, besides its own.
ext = os.path.join(root, "python", "ext")
for name in sorted(os.listdir(ext)) if os.path.isdir(ext) else []:
    if name.endswith((".c", ".h")):
        for inc in includes(os.path.join(ext, name)):
            if not inc.startswith("stoke/") and not os.path.exists(os.path.join(ext, inc)):
                errors.append(f"python/ext/{name}: includes {inc}, a private header of the "
                              "library")
for e in errors:
    print(e)
print(f"{len(errors)} crossing(s)")
sys.exit(1 if errors else 0)
