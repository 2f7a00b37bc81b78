"""env_readers.py SRC_ROOT - the environment is read in one place (docs/environment.md).
Fails, naming file and line, when: getenv/secure_getenv is called anywhere in src/ or
python/ext but src/core/env.c; a stoke_env() argument is neither a string literal nor a
macro defined as one (outside the two tables that pass a row's name: the configuration
keys and the NVIDIA library loader); a variable read by name is missing from
docs/environment.md's table; a row of that table names a variable nothing reads; or the
Python layer reads os.environ for a variable the table does not list."""
import os
import re
import sys

root = sys.argv[1]
GETENV = re.compile(r"\b(?:secure_)?getenv\s*\(")
CALL = re.compile(r"\bstoke_env\s*\(\s*([^()]*?)\s*\)")
# a name starts upper case; OpenMPI's MCA settings go on in lower case
# (OMPI_MCA_odls_base_sigkill_timeout)
DEFINE = re.compile(r'^\s*#\s*define\s+([A-Z_][A-Z0-9_]*)\s+"([A-Z_][A-Za-z0-9_]*)"', re.M)
LITERAL = re.compile(r'^"([A-Z_][A-Za-z0-9_]*)"$')
ROW = re.compile(r"^\|\s*`([A-Z_][A-Za-z0-9_]*)`", re.M)
PYENV = re.compile(r"""os\.(?:environ(?:\.get)?\s*[\[(]\s*|getenv\s*\(\s*)["']([A-Z_][A-Za-z0-9_]*)["']""")
# Files whose stoke_env() takes a table row's name; the rows' names are string literals
# elsewhere in src/ and must be documented like any other.
TABLES = {"src/train/config.c", "src/core/dl.c", "src/hw/dl.c", "src/nn/cuda/dl.c"}


def sources(*dirs, ext=(".c", ".h")):
    for d in dirs:
        for base, _, files in os.walk(os.path.join(root, d)):
            for f in sorted(files):
                if f.endswith(ext):
                    p = os.path.join(base, f)
                    yield os.path.relpath(p, root), open(p, encoding="utf-8").read()


errors = []
files = list(sources("src", "include", "python/ext"))
macros = {}
for _, text in files:
    macros.update(dict(DEFINE.findall(text)))

read = {}  # name -> first file:line reading it
for rel, text in files:
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("//")[0]
        if GETENV.search(code) and rel != "src/core/env.c" and not code.lstrip().startswith("*"):
            errors.append(f"{rel}:{n}: getenv outside src/core/env.c; use stoke_env()")
        for arg in CALL.findall(code):
            if rel in ("src/core/env.c", "src/core/env.h"):
                continue
            m = LITERAL.match(arg)
            name = m.group(1) if m else macros.get(arg)
            if name:
                read.setdefault(name, f"{rel}:{n}")
            elif rel not in TABLES:
                errors.append(f"{rel}:{n}: stoke_env({arg}): not a literal name")

for rel, text in sources("python/stoke", ext=(".py",)):
    for n, line in enumerate(text.splitlines(), 1):
        for name in PYENV.findall(line):
            read.setdefault(name, f"{rel}:{n}")

doc_path = os.path.join(root, "docs", "environment.md")
doc = open(doc_path, encoding="utf-8").read()
documented = set(ROW.findall(doc))
for name, where in sorted(read.items()):
    if name not in documented:
        errors.append(f"{where}: {name} is read but not in docs/environment.md")
everything = "\n".join(t for _, t in files) + "\n".join(t for _, t in sources("python/stoke", ext=(".py",)))
for name in sorted(documented):
    if name not in read and f'"{name}"' not in everything:
        errors.append(f"docs/environment.md: {name} is documented but nothing reads it")

for e in errors:
    print(e)
print(f"env_readers: {len(read)} variables read by name, {len(documented)} documented, "
      f"{len(errors)} problem(s)")
sys.exit(1 if errors else 0)
