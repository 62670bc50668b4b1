"""The cffi declarations (sdk-python/src/dstrain/_cdef.py) must match
capi/include/dstrain/dstrain.h: functions, enums, struct fields, constants,
the ABI version -- and the Python mirrors of the enums and of
dst_engine_info_t. A change to the header fails here with a diff saying what
to copy into _cdef.py.

The textual checks need neither the library nor a compiler; the layout check
compiles the header with the C compiler and compares sizes and offsets with
cffi's.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import pathlib
import re
import shutil
import subprocess

import pytest

import header_reader
from sdk_support import HEADER, SDK_SRC


def _load_cdef_module():
    """_cdef.py on its own (importing the package would load the library)."""
    spec = importlib.util.spec_from_file_location("_dstrain_cdef", SDK_SRC / "dstrain" / "_cdef.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CDEF_MODULE = _load_cdef_module()
HEADER_DECLS = header_reader.read(HEADER.read_text())
CDEF_DECLS = header_reader.read(CDEF_MODULE.CDEF)


def test_reader_understands_the_header():
    assert not HEADER_DECLS.unparsed, f"header_reader could not parse: {HEADER_DECLS.unparsed}"
    assert not CDEF_DECLS.unparsed, f"header_reader could not parse the cdef: {CDEF_DECLS.unparsed}"
    # Sanity: the reader found the things we know are there.
    assert "dst_engine_create" in HEADER_DECLS.functions
    assert "dst_batch_t" in HEADER_DECLS.structs
    assert HEADER_DECLS.enums["dst_status_t"][0] == ("DST_OK", "0")
    assert "dst_engine_t" in HEADER_DECLS.opaque


def test_cdef_matches_header():
    header, cdef = HEADER_DECLS.render(), CDEF_DECLS.render()
    if header != cdef:
        diff = "\n".join(
            difflib.unified_diff(header, cdef, "dstrain.h", "_cdef.CDEF", lineterm="", n=2)
        )
        pytest.fail(
            "sdk-python/src/dstrain/_cdef.py has drifted from capi/include/dstrain/dstrain.h "
            "('-' lines are the header, '+' lines the cdef); copy the header's declarations "
            "into CDEF:\n" + diff
        )


def test_abi_version_matches_header():
    ints = HEADER_DECLS.int_defines()
    header = (ints["DST_VERSION_MAJOR"], ints["DST_VERSION_MINOR"])
    package = (CDEF_MODULE.DST_VERSION_MAJOR, CDEF_MODULE.DST_VERSION_MINOR)
    assert package == header, (
        f"dstrain.h is ABI {header[0]}.{header[1]} but _cdef.py says {package[0]}.{package[1]}: "
        "update DST_VERSION_MAJOR/MINOR in sdk-python/src/dstrain/_cdef.py (and the cdef)"
    )
    text = (SDK_SRC / "dstrain" / "_version.py").read_text()
    version = re.search(r'__version__\s*=\s*"(\d+)\.(\d+)\.', text)
    assert version and (int(version.group(1)), int(version.group(2))) == header, (
        "the package version in sdk-python/src/dstrain/_version.py must have the header's "
        f"major.minor {header[0]}.{header[1]}"
    )


def test_status_enum_mirrors_header():
    # errors.py has no library dependency: import it by path.
    spec = importlib.util.spec_from_file_location("_dstrain_errors", SDK_SRC / "dstrain" / "errors.py")
    errors = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(errors)
    header = {
        name[len("DST_ERR_"):] if name.startswith("DST_ERR_") else name[len("DST_"):]: int(value)
        for name, value in HEADER_DECLS.enums["dst_status_t"]
    }
    python = {member.name: int(member) for member in errors.Status}
    assert python == header
    # Every non-OK status has its exception class carrying that status.
    for status in errors.Status:
        if status == errors.Status.OK:
            continue
        error = errors.error_for_status(int(status), "message")
        assert error.status == status and str(error) == "message"
        assert type(error) is not errors.DstrainError, f"no exception class for {status.name}"


def test_python_mirrors_match_header(dst):
    """ModelType, LossType, Split and EngineInfo against the header."""
    from dstrain.dataset import Split

    def header_enum(name: str, prefix: str):
        return {item[len(prefix):]: int(v) for item, v in HEADER_DECLS.enums[name]}

    assert {m.name: int(m) for m in dst.ModelType} == header_enum("dst_model_type_t", "DST_MODEL_")
    assert {m.name: int(m) for m in dst.LossType} == header_enum("dst_loss_type_t", "DST_LOSS_")
    assert {m.name: int(m) for m in Split} == header_enum("dst_split_t", "DST_SPLIT_")
    header_fields = HEADER_DECLS.struct_fields("dst_engine_info_t")
    assert header_fields[0] == "struct_size"
    assert [f.name for f in dataclasses.fields(dst.EngineInfo)] == header_fields[1:], (
        "dstrain.EngineInfo must list dst_engine_info_t's fields (after struct_size) in order"
    )


def test_every_function_is_exported(dst):
    """Each declared function resolves in the loaded library (cffi resolves
    lazily, so a missing symbol would otherwise surface only when called)."""
    from dstrain import _lib

    missing = []
    for name in CDEF_DECLS.functions:
        try:
            getattr(_lib.lib, name)
        except AttributeError:
            missing.append(name)
    assert not missing, f"{_lib.library_path} does not export {missing}: rebuild the library"


LAYOUT_PROGRAM = """
#include <stddef.h>
#include <stdio.h>
#include "dstrain/dstrain.h"
int main(void) {
%s
  return 0;
}
"""


def test_struct_layout_matches_compiler(dst, tmp_path):
    """sizeof/offsetof of every struct and field as the C compiler lays out the
    real header, against cffi's layout of the cdef."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        pytest.skip("no C compiler (cc) to compile the header")
    from dstrain import _lib

    lines, expected = [], {}
    for struct in sorted(HEADER_DECLS.structs):
        lines.append(f'  printf("{struct} %zu\\n", sizeof({struct}));')
        expected[struct] = _lib.ffi.sizeof(struct)
        for field in HEADER_DECLS.struct_fields(struct):
            key = f"{struct}.{field}"
            lines.append(f'  printf("{key} %zu\\n", offsetof({struct}, {field}));')
            expected[key] = _lib.ffi.offsetof(struct, field)
    source = tmp_path / "layout.c"
    source.write_text(LAYOUT_PROGRAM % "\n".join(lines))
    binary = tmp_path / "layout"
    include = pathlib.Path(HEADER).parents[1]
    subprocess.run([compiler, "-std=c99", "-I", str(include), str(source), "-o", str(binary)],
                   check=True, timeout=120)
    out = subprocess.run([str(binary)], check=True, capture_output=True, text=True, timeout=60)
    actual = {k: int(v) for k, v in (line.split() for line in out.stdout.splitlines())}
    assert actual == expected


def test_reader_reports_a_drift():
    """The reader notices an added field, a changed prototype and a new enum value."""
    changed = (
        HEADER.read_text()
        .replace("int64_t output_dim;", "int64_t output_dim;\n  int64_t future_field;")
        .replace("int dst_version_number(void);", "long dst_version_number(void);")
        .replace("DST_ERR_INTERNAL = 10", "DST_ERR_INTERNAL = 10,\n  DST_ERR_TIMEOUT = 11")
    )
    diff = set(header_reader.read(changed).render()) ^ set(HEADER_DECLS.render())
    assert "  int64_t future_field;" in diff
    assert "long dst_version_number();" in diff
    assert "  DST_ERR_TIMEOUT = 11" in diff
