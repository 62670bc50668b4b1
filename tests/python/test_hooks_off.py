"""A default build (DSTRAIN_TEST_HOOKS=OFF) holds no test or fault-injection
hook: no environment variable can steer an installed library into a test
path. Every source naming a DSTRAIN_TEST_* or DSTRAIN_INJECT_* variable is
either left out of such a build (the stand-in device) or compiled by the test
build as the default build compiles it (tests/CMakeLists.txt:
dstrain_hooks_off_objects), and those objects hold none of the names."""

import os
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DSTRAIN_BUILD_DIR", ROOT / "build"))
HOOK_NAME = re.compile(rb"DSTRAIN_(TEST|INJECT)_[A-Z_]+")
LEFT_OUT = {"core/device/guarded_device.cc"}  # not compiled without the hooks (CMakeLists.txt)


def hook_sources():
    """Sources of the library with a hook variable's name in a string literal."""
    found = set()
    for folder in ("core", "capi", "cli", "metrics"):
        for path in (ROOT / folder).rglob("*.cc"):
            if re.search(rb'"DSTRAIN_(TEST|INJECT)_', path.read_bytes()):
                found.add(str(path.relative_to(ROOT)))
    return found


def checked_sources():
    text = (ROOT / "tests" / "CMakeLists.txt").read_text()
    block = text.split("set(DSTRAIN_HOOK_SOURCES", 1)[1].split(")", 1)[0]
    return {s.replace("${PROJECT_SOURCE_DIR}/", "") for s in block.split()}


def test_every_source_with_a_hook_is_left_out_or_checked():
    assert hook_sources() - LEFT_OUT <= checked_sources(), (
        "a source names a DSTRAIN_TEST_/DSTRAIN_INJECT_ variable outside the checked list: "
        "guard it with #if DSTRAIN_TEST_HOOKS (core/common/test_hooks.h) and add it to "
        "DSTRAIN_HOOK_SOURCES in tests/CMakeLists.txt")


def test_the_default_builds_objects_hold_no_hook_name():
    objects = sorted((BUILD / "tests" / "CMakeFiles" / "dstrain_hooks_off_objects.dir")
                     .rglob("*.o"))
    assert len(objects) == len(checked_sources()), objects
    for obj in objects:
        names = sorted({m.group(0).decode() for m in HOOK_NAME.finditer(obj.read_bytes())})
        assert not names, f"{obj.name} compiled without the hooks still names {names}"
    # The same sources in this (hooks-on) build do name them: the search can fail.
    core = BUILD / "CMakeFiles" / "dstrain_core.dir" / "core" / "engine" / "job.cc.o"
    if core.exists() and b"DSTRAIN_TEST_HOOKS 1" in (
            BUILD / "generated" / "core" / "common" / "test_hooks.h").read_bytes():
        assert HOOK_NAME.search(core.read_bytes())
