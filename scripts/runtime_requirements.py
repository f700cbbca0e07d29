"""Print the entries of requirements.lock (pins and hashes) that spark-bot needs at run time.

The lock holds the dev extra too (pytest, pip-audit, ...). Run-time packages are the project's
dependencies in pyproject.toml and, following the lock's `# via` notes, whatever one of those
needs. The Dockerfile installs the result with `pip install --require-hashes`, which refuses a
list that misses a dependency. Standard library only (it runs in the image's build stage).

    python3 scripts/runtime_requirements.py requirements.lock pyproject.toml > runtime.txt
"""

from __future__ import annotations

import re
import sys
import tomllib

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_entries(text: str) -> dict[str, tuple[str, set[str]]]:
    """name -> (its requirement lines: pin and hashes, the names of what needs it)."""
    entries: dict[str, tuple[str, set[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        pin = re.match(r"([A-Za-z0-9][A-Za-z0-9_.-]*)==", block)
        if pin is None:
            continue
        requirement = "\n".join(line for line in block.splitlines() if "#" not in line)
        notes = " ".join(re.findall(r"#\s*(?:via)?\s*(.*)", block))
        parents = {normalized(name) for name in NAME.findall(notes.replace("(pyproject.toml)", ""))}
        entries[normalized(pin[1])] = (requirement.rstrip(" \\\n"), parents)
    return entries


def runtime(lock: str, pyproject: str) -> list[str]:
    entries = lock_entries(lock)
    dependencies = tomllib.loads(pyproject)["project"]["dependencies"]
    needed = {normalized(match[0]) for dep in dependencies if (match := NAME.match(dep))}
    grown = True
    while grown:
        more = {name for name, (_, parents) in entries.items() if parents & needed} - needed
        needed |= more
        grown = bool(more)
    missing = needed - entries.keys()
    if missing:
        raise SystemExit(f"not in the lock: {', '.join(sorted(missing))}; regenerate it")
    return [entries[name][0] for name in sorted(needed)]


if __name__ == "__main__":
    with open(sys.argv[1]) as lock, open(sys.argv[2]) as pyproject:
        print("\n".join(runtime(lock.read(), pyproject.read())))
