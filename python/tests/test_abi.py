"""The ctypes mirrors equal the C declarations: a probe compiled with the
system compiler against include/nucleus.h prints the size of every mirrored
structure, the offset of each of its fields (by the same names), the value of
every mirrored constant, and takes the address of every function the package
calls (so a missing or renamed one fails to compile)."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess

import pytest

from conftest import REPO
from nucleus import _ffi


def _probe_source() -> str:
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "nucleus.h"', "",
             "int main(void) {"]
    for s in _ffi.STRUCTS:
        name = s.__name__
        lines.append(f'    printf("size {name} %zu\\n", sizeof({name}));')
        for fname, _ in s._fields_:
            lines.append(f'    printf("offset {name}.{fname} %zu\\n", offsetof({name}, {fname}));')
    for cname in _ffi.ENUM_CONSTANTS:
        lines.append(f'    printf("const {cname} %lld\\n", (long long)({cname}));')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def _functions_source() -> str:
    """Takes the address of every function the package binds: compiling it
    (without linking) fails for a name nucleus.h does not declare."""
    lines = ['#include "nucleus.h"', "", "const void *nucleus_functions[] = {"]
    lines += [f"    (const void *)&{fn}," for fn in _ffi.PROTOTYPES]
    return "\n".join(lines + ["};"]) + "\n"


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    assert cc, "no C compiler (cc, gcc or clang) to build the ABI probe"
    return cc


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    cc = _compiler()
    d = tmp_path_factory.mktemp("abi")
    (d / "probe.c").write_text(_probe_source())
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", "-I", str(REPO / "include"),
                    str(d / "probe.c"), "-o", str(d / "probe")], check=True,
                   capture_output=True, text=True)
    out = subprocess.run([str(d / "probe")], check=True, capture_output=True, text=True).stdout
    facts = {}
    for line in out.splitlines():
        kind, name, value = line.split()
        facts[(kind, name)] = int(value)
    return facts


@pytest.mark.parametrize("struct", _ffi.STRUCTS, ids=lambda s: s.__name__)
def test_struct_layout(probe, struct):
    name = struct.__name__
    assert ctypes.sizeof(struct) == probe[("size", name)], f"sizeof({name})"
    for fname, _ in struct._fields_:
        assert getattr(struct, fname).offset == probe[("offset", f"{name}.{fname}")], \
            f"offsetof({name}, {fname})"


def test_constants(probe):
    for cname, value in _ffi.ENUM_CONSTANTS.items():
        assert value == probe[("const", cname)], cname


def test_functions_are_declared(tmp_path):
    (tmp_path / "functions.c").write_text(_functions_source())
    proc = subprocess.run([_compiler(), "-std=c11", "-fsyntax-only", "-Werror",
                           "-Werror=implicit-function-declaration", "-I", str(REPO / "include"),
                           str(tmp_path / "functions.c")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_probe_sees_a_wrong_layout(probe):
    """The comparison can fail: a structure with a field too few differs."""
    class nu_context_params(ctypes.Structure):
        _fields_ = _ffi.nu_context_params._fields_[:-1]
    assert ctypes.sizeof(nu_context_params) != probe[("size", "nu_context_params")]


def test_every_struct_field_of_the_header_is_mirrored():
    """Each mirrored struct has as many fields as its C declaration (so that
    a field left out where padding hides it is caught too): the header's
    declarations, one per ';' (names separated by commas counted apart, a
    function pointer once)."""
    header = (REPO / "include" / "nucleus.h").read_text()
    for s in _ffi.STRUCTS:
        name = s.__name__
        m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), header, re.S)
        assert m, f"{name} not found in nucleus.h"
        body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
        decls = [d.strip() for d in body.split(";") if d.strip()]
        n_fields = sum(1 if "(" in d else len(d.split(",")) for d in decls)
        assert n_fields == len(s._fields_), \
            f"{name}: {n_fields} fields in C, {len(s._fields_)} mirrored"
