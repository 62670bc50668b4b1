"""The C ABI only grows (docs/abi.md): scripts/abi-check.py compares this
build's exported symbols and dstrain.h's layouts with capi/abi/baseline.txt."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "abi-check.py")
BUILD = os.environ.get("DSTRAIN_BUILD_DIR", os.path.join(ROOT, "build"))


def check(*args):
    return subprocess.run([sys.executable, SCRIPT, "--build", BUILD, *args],
                          capture_output=True, text=True, timeout=300)


def test_this_build_keeps_the_baseline_abi():
    out = check()
    assert out.returncode == 0, out.stderr
    assert "baseline entries hold" in out.stdout


def test_a_removed_symbol_a_shrunk_struct_and_a_moved_field_fail(tmp_path):
    with open(os.path.join(ROOT, "capi", "abi", "baseline.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    sizes = [line for line in lines if line.startswith("sizeof dst_engine_options_t ")]
    offsets = [line for line in lines if line.startswith("offsetof dst_engine_options_t.")]
    assert sizes and len(offsets) > 1
    size = int(sizes[0].split()[2])
    field, offset = offsets[1].split()[1], int(offsets[1].split()[2])
    changed = [line for line in lines if line not in (sizes[0], offsets[1])] + [
        "symbol dst_function_removed_since",
        f"sizeof dst_engine_options_t {size + 8}",  # the struct is now smaller than this
        f"offsetof {field} {offset + 4}",
    ]
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("\n".join(changed) + "\n")
    out = check("--baseline", str(baseline))
    assert out.returncode == 1
    assert "symbol dst_function_removed_since: no longer exported" in out.stderr
    assert f"sizeof dst_engine_options_t: {size + 8} in the baseline, {size} now" in out.stderr
    assert f"offsetof {field}: {offset + 4} in the baseline, {offset} now" in out.stderr
    # Growth is allowed: a baseline from a smaller struct still holds.
    grown = [line for line in lines if line != sizes[0]]
    grown.append(f"sizeof dst_engine_options_t {size - 8}")
    baseline.write_text("\n".join(grown) + "\n")
    assert check("--baseline", str(baseline)).returncode == 0
