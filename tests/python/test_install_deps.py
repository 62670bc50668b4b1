"""Every Python module the test suite imports and every tool it runs comes
from a Debian package that scripts/install-deps.sh installs, so a fresh
machine passes `bash scripts/test.sh` and not only one that had the package
installed by hand (python3-typeshed, mypy's cffi stubs, was missing once and
CI stayed green). The next missing package fails here, where it is added.
"""

import ast
import os
import pathlib
import re
import shutil
import subprocess
import sys
import importlib.util

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
INSTALL_DEPS = REPO / "scripts" / "install-deps.sh"

# Tools the tests and scripts run (a test that needs one skips without it,
# which is exactly how a missing package would go unnoticed).
TOOLS = ["cmake", "ctest", "cc", "c++", "pkg-config", "python3", "mypy", "pip3", "promtool",
         "prometheus", "chromium", "ip", "mpirun", "srun", "node", "npm", "cargo"]
# Installed elsewhere on purpose (install-deps.sh adds Debian's only when absent).
MAY_COME_FROM_ELSEWHERE = {"node", "npm", "cargo"}
# mypy --strict needs these stubs (test_typing.py): module -> the stub's file.
STUBS = {"cffi": "cffi-stubs/__init__.pyi"}


def listed_packages():
    text = INSTALL_DEPS.read_text()
    block = re.search(r"PACKAGES=\((.*?)\n\)", text, re.S)
    assert block, "scripts/install-deps.sh has no PACKAGES=( ... ) list"
    names = set()
    for line in block.group(1).splitlines():
        names.update(w for w in line.split("#", 1)[0].split())
    names.update(re.findall(r"PACKAGES\+=\(([^)]*)\)", text) and
                 " ".join(re.findall(r"PACKAGES\+=\(([^)]*)\)", text)).split())
    return names


def owner(path):
    """The Debian package that owns `path` (following links; dpkg records
    merged-/usr files under /bin and /sbin), or None."""
    candidates = [path, os.path.realpath(path)]
    for c in list(candidates):
        name = os.path.basename(c)
        candidates += [f"/bin/{name}", f"/sbin/{name}", f"/usr/bin/{name}", f"/usr/sbin/{name}"]
    for candidate in candidates:
        result = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if result.returncode == 0:
            return result.stdout.split(":", 1)[0].split(",")[0].strip()
    return None


def depends_closure(package, depth=3):
    """`package` and what it depends on, `depth` levels down (meta packages
    such as build-essential -> gcc -> gcc-12)."""
    seen, frontier = {package}, [package]
    for _ in range(depth):
        result = subprocess.run(["dpkg-query", "-W", "-f=${Pre-Depends},${Depends},", *frontier],
                                capture_output=True, text=True)
        frontier = []
        for item in result.stdout.replace("|", ",").split(","):
            name = item.strip().split(" ")[0].split(":")[0]
            if name and name not in seen:
                seen.add(name)
                frontier.append(name)
        if not frontier:
            break
    return seen


def ours(name):
    """A module this repository provides (tests/, bench/, the Python SDK)."""
    for root in (REPO / "tests", REPO / "bench", REPO / "sdk-python"):
        if list(root.rglob(f"{name}.py")) or any(p.is_dir() for p in root.rglob(name)):
            return True
    return False


def imported_modules():
    """Top-level modules imported by the test suite's Python files."""
    modules = set()
    for path in list((REPO / "tests").rglob("*.py")) + list((REPO / "bench").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules.add(node.module.split(".")[0])
    return modules


def provided(package, listed):
    if package in listed:
        return True
    return any(package in depends_closure(p) for p in listed)


pytestmark = pytest.mark.skipif(shutil.which("dpkg") is None, reason="not a Debian system")


def test_every_imported_module_comes_from_a_listed_package():
    listed = listed_packages()
    missing = []
    for name in sorted(imported_modules()):
        if name in sys.stdlib_module_names or name == "__future__" or ours(name):
            continue
        spec = importlib.util.find_spec(name)
        if spec is None:
            missing.append(f"{name}: not installed")
            continue
        origin = spec.origin or (list(spec.submodule_search_locations or [None])[0])
        if origin is None or str(origin).startswith(str(REPO)) or "site-packages" in str(origin):
            continue  # ours (tests/, sdk-python in a venv)
        package = owner(origin)
        if package is None or not provided(package, listed):
            missing.append(f"{name} ({origin}) comes from {package or 'no package'}")
    assert not missing, ("add to scripts/install-deps.sh: " + "; ".join(missing))


def test_every_tool_the_suite_runs_comes_from_a_listed_package():
    listed = listed_packages()
    missing = []
    for tool in TOOLS:
        system = f"/usr/bin/{tool}"
        if tool in ("python3", "pip3"):  # the suite calls the system's, not one earlier on PATH
            path = system if os.path.exists(system) else None
        else:
            path = shutil.which(tool) or (system if os.path.exists(system) else None)
        if path is None:
            missing.append(f"{tool}: not installed")
            continue
        package = owner(path)
        if package is None and tool in MAY_COME_FROM_ELSEWHERE:
            continue
        if package is None or not provided(package, listed):
            missing.append(f"{tool} ({path}) comes from {package or 'no package'}")
    assert not missing, ("add to scripts/install-deps.sh: " + "; ".join(missing))


def test_mypy_finds_the_stubs_it_needs_in_a_listed_package():
    listed = listed_packages()
    for module, stub in STUBS.items():
        found = subprocess.run(["dpkg", "-S", stub], capture_output=True, text=True)
        packages = {line.split(":", 1)[0] for line in found.stdout.splitlines()}
        assert packages & listed or any(provided(p, listed) for p in packages), (
            f"mypy's stubs for {module} ({stub}) come from {packages or 'no package'}; add it "
            "to scripts/install-deps.sh")


def test_scripts_and_benchmarks_call_the_system_python():
    """A python3 earlier on PATH without torch once broke bench/bench_dp.py."""
    offenders = []
    for path in list((REPO / "bench").glob("*.py")) + list((REPO / "scripts").glob("*")):
        if not path.is_file() or path.name == "install-deps.sh":  # it lists packages, runs none
            continue
        first = path.read_text(errors="replace").splitlines()[:1]
        if first and first[0].startswith("#!") and "python" in first[0] and \
                first[0].strip() != "#!/usr/bin/python3":
            offenders.append(f"{path.relative_to(REPO)}: {first[0]}")
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if re.search(r"(^\s*|exec\s+|&&\s*|;\s*|\|\s*|\$\()python3?\s", line) \
                    and "/usr/bin/python3" not in line \
                    and not line.lstrip().startswith("#") and path.suffix != ".py":
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not offenders, "call /usr/bin/python3 explicitly: " + "; ".join(offenders)
