"""The extension's thread-local storage stays small enough for glibc's static
TLS surplus, and (GCC on x86-64) is reached through TLS descriptors
(pyext/CMakeLists.txt). Then every thread_local access on the capture path
is a load, not a call to __tls_get_addr: on 3.12's calls predict that call
was about 1M of the 14-16M instructions a session added
(bench/results/capture-instructions-11e5712.json, "method").
A large thread_local (a 2.5 KB random generator was one) pushes the module
out of the surplus and every access back to the call, with nothing failing;
this test is what notices. Read with binutils' readelf."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess

import pytest
from _helpers import require_tool

from mlflow_profiler import _core

CORE_SO = os.path.realpath(_core.__file__)
# glibc's rtld.optional_static_tls default: the room it keeps for modules
# loaded with dlopen (other modules may take part of it first). 272-340 bytes
# today (3.12 with LTO, 3.11 without); the rest of the surplus is for the others.
SURPLUS = 512
OURS_AT_MOST = 384


def readelf(*args: str) -> str:
    """readelf's output for the extension."""
    tool = require_tool(shutil.which("readelf"), "readelf", "apt-get install binutils")
    return subprocess.run(
        [tool, "--wide", *args, CORE_SO], capture_output=True, text=True, check=True
    ).stdout


def test_the_extensions_thread_locals_fit_glibcs_static_surplus():
    tls = [line.split() for line in readelf("-l").splitlines() if line.strip().startswith("TLS ")]
    assert len(tls) <= 1, tls
    memsz = int(tls[0][5], 16) if tls else 0
    assert memsz <= OURS_AT_MOST, (
        f"{CORE_SO}: {memsz} bytes of thread_local (PT_TLS); at most {OURS_AT_MOST} of glibc's "
        f"{SURPLUS}-byte surplus (readelf -sW: the TLS symbols; a large one belongs on the heap)"
    )


def test_thread_locals_are_reached_through_descriptors_where_gcc_built_for_x86_64():
    comment = readelf("-p", ".comment")
    if platform.machine() != "x86_64" or "clang version" in comment or "GCC:" not in comment:
        pytest.skip("the dialect flag is GCC's on x86-64 (the sanitizer builds use clang)")
    relocs = readelf("-r")
    assert re.search(r"R_X86_64_TLSDESC\b", relocs), "no TLS descriptor relocations"
    # General-dynamic accesses of the module's own variables would be DTPMOD64
    # relocations against the module itself (symbol index 0).
    own = [line for line in relocs.splitlines() if "R_X86_64_DTPMOD64" in line]
    assert not own, own
