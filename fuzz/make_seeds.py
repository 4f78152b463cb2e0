"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) from real
outputs: a small model profiled in every format save() writes and added to
a store, and, where the tools are installed, py-spy's two formats of a real
process, a Go program's CPU profile, the _PyRuntime bytes of CPython 3.14+
and a small ELF with a .PyRuntime section and mlprof's USDT note (gcc). The
agent's text parsers start from the recorded host in tests/cpp/data; its
record and body targets from tests/cpp/test_joiner.cpp (JoinerFuzzSeeds).
Run it with the package importable; the seeds are committed, so the fuzzers
start from the same files everywhere.

    python fuzz/make_seeds.py [--py-spy PATH] [--go PATH] [--cc PATH] [--python3.14 PATH ...]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import mlflow_profiler as mp

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
MAX_SEED = 64 * 1024  # libFuzzer's -max_len in scripts/fuzz.sh
MAX_FILE_SEED = 256 * 1024  # its -max_len for the BoltDB and store targets
RECORDED = HERE.parent / "tests" / "cpp" / "data"


def _leaf(n):
    return sum(i * i for i in range(n))


def _gen(n):
    for i in range(n):
        yield _leaf(50 + i)


async def _ask(k):
    await asyncio.sleep(0.001 * k)
    return _leaf(100)


async def _fan_out():
    return await asyncio.gather(*(_ask(k) for k in range(3)))


def _model(rows):
    with mp.profile_block("featurize", resource="cpu"):
        feats = [_leaf(200) for _ in rows]
    worker = threading.Thread(target=_leaf, args=(5000,), name="worker")
    worker.start()
    total = sum(_gen(4)) + sum(asyncio.run(_fan_out()))
    worker.join()
    return feats, total


def _put(target: str, name: str, data: bytes) -> None:
    big = target in ("fuzz_agent_boltdb", "fuzz_store_read")
    if len(data) > (MAX_FILE_SEED if big else MAX_SEED):
        return
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def ours(tmp: Path) -> None:
    """Every format save() writes, at two depths, with and without I/O summaries."""
    for depth, io in ((2, False), (-1, True)):
        with mp.profiling(depth=depth, capture_io=io) as session:
            _model([1, 2, 3])
        tag = f"depth{depth}{'-io' if io else ''}"
        for ext in ("json", "json.gz", "trace.json", "pb.gz", "speedscope.json", "folded"):
            path = session.save(tmp / f"{tag}.{ext}")
            data = Path(path).read_bytes()
            _put("fuzz_import_any", f"ours-{tag}.{ext}", data)
            if ext in ("json", "json.gz"):
                _put("fuzz_document", f"ours-{tag}.{ext}", data)
            elif ext == "trace.json":
                _put("fuzz_import_chrome", f"ours-{tag}.{ext}", data)
            elif ext == "pb.gz":
                _put("fuzz_import_pprof", f"ours-{tag}.pb", gzip.decompress(data))
            elif ext == "speedscope.json":
                _put("fuzz_import_speedscope", f"ours-{tag}.{ext}", data)
            elif ext == "folded":
                _put("fuzz_import_folded", f"ours-{tag}.{ext}", data)


def store(tmp: Path) -> None:
    """A store with a span source and a sampled-stacks source, vacuumed small."""
    import sqlite3

    from mlflow_profiler.store import open_store

    path = tmp / "seed.db"
    with mp.profiling(depth=-1, capture_io=True) as session:
        _model([1, 2])
    folded = tmp / "stacks.folded"
    folded.write_text("predict;featurize;tokenize 7\npredict;score 3\n")
    with open_store(str(path)) as st:
        st.add(session, labels={"model": "seed", "version": "1"})
        st.add(str(folded))
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA page_size=512")
    db.execute("VACUUM")
    db.close()
    _put("fuzz_store_read", "two-sources.db", path.read_bytes())


def agent_files() -> None:
    """The recorded host's files, each to the parser that reads it."""
    proc = RECORDED / "proc"
    for pid in ("12446", "12711", "20001"):
        _put("fuzz_agent_maps", f"maps-{pid}", (proc / pid / "maps").read_bytes())
    for pid in sorted(os.listdir(proc)):
        _put("fuzz_agent_cgroup", f"cgroup-{pid}", (proc / pid / "cgroup").read_bytes())
    _put("fuzz_agent_mountinfo", "hybrid", (RECORDED / "mountinfo-hybrid").read_bytes())
    for config in sorted((RECORDED / "containerd").rglob("config.json")):
        _put(
            "fuzz_agent_k8s",
            f"oci-{config.parent.parent.name}-{config.parent.name[:8]}",
            config.read_bytes(),
        )
    _put(
        "fuzz_agent_k8s",
        "log-names",
        b"default_scorer-6c5d8_0b1c2d3e-aaaa-bbbb-cccc-0123456789ab\n"
        b"scorer-6c5d8_default_model-3d0d3d0d3d0d.log\n",
    )
    _put("fuzz_agent_boltdb", "podman-4.3", (RECORDED / "podman" / "bolt_state.db").read_bytes())
    results = {
        "loaded": {
            "ok": True,
            "python": "3.14.0",
            "executable": "/usr/bin/python3.14",
            "stage": "autoprofile",
            "file": "/opt/mlflow_profiler/__init__.py",
            "version": "0.9.0",
            "seconds": 0.012,
        },
        "already": {
            "ok": True,
            "python": "3.14.0",
            "executable": "",
            "stage": "autoprofile",
            "file": "/x/mlflow_profiler/__init__.py",
            "version": "0.9.0",
            "already": True,
            "seconds": 0.002,
        },
        "import-failed": {
            "ok": False,
            "python": "3.14.0",
            "executable": "/usr/bin/python3",
            "stage": "import",
            "tried": ["/opt"],
            "error": "ModuleNotFoundError: No module named 'mlflow_profiler'",
            "seconds": 0.001,
        },
    }
    for name, doc in results.items():
        _put("fuzz_agent_inject_result", name, json.dumps(doc).encode())
    _put(
        "fuzz_agent_inject_result",
        "environ-cmdline",
        b"PATH=/usr/bin\x00PYTHON_DISABLE_REMOTE_DEBUG=1\x00\npython\x00-X\x00disable-remote-debug\x00",
    )
    for i, text in enumerate(
        (
            "(DataFrame, shape=(1000, 50), dtype=float64, 400.0KB)",
            "(ndarray, shape=(1000,), dtype=int64, 7.8KB)",
            "(Tensor, shape=(?, 128), dtype=float32, device=cuda:0, 4.0KB)",
            "(str, len=5, 'hello')",
            "(NoneType)",
            "(dict, len=3, 120B)",
        )
    ):
        _put("fuzz_agent_io_text", f"summary-{i}", text.encode())


def pyruntime(python: str) -> None:
    """The first 4 KiB at _PyRuntime of a running CPython 3.14+: its
    _Py_DebugOffsets, as --inject reads them from a target."""
    code = (
        "import ctypes, sys; a = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "
        "'_PyRuntime')); sys.stdout.buffer.write(ctypes.string_at(a, 4096))"
    )
    out = subprocess.run([python, "-c", code], check=True, capture_output=True, timeout=60).stdout
    version = subprocess.run(
        [
            python,
            "-c",
            "import sys; print(sys.version.split()[0] + "
            "('t' if not sys._is_gil_enabled() else ''))",
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    _put("fuzz_agent_debug_offsets", f"pyruntime-{version}", out)


ELF_PROGRAM = r"""
/* A .PyRuntime section and one mlprof USDT note, as <sys/sdt.h> writes it. */
__attribute__((section(".PyRuntime"), used)) char runtime[64] = "xdebugpy";
unsigned short mlprof_session_begin_semaphore __attribute__((section(".probes"), used));
int main(void) {
  __asm__ volatile(
      "990: nop\n"
      ".pushsection .note.stapsdt,\"?\",\"note\"\n"
      ".balign 4\n"
      ".4byte 992f-991f, 994f-993f, 3\n"
      "991: .asciz \"stapsdt\"\n"
      "992: .balign 4\n"
      "993: .8byte 990b\n"
      ".8byte _.stapsdt.base\n"
      ".8byte mlprof_session_begin_semaphore\n"
      ".asciz \"mlprof\"\n"
      ".asciz \"session_begin\"\n"
      ".asciz \"8@%%rdi\"\n"
      "994: .balign 4\n"
      ".popsection\n"
      ".ifndef _.stapsdt.base\n"
      ".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n"
      ".weak _.stapsdt.base\n"
      ".hidden _.stapsdt.base\n"
      "_.stapsdt.base: .space 1\n"
      ".size _.stapsdt.base, 1\n"
      ".popsection\n"
      ".endif\n" ::);
  return runtime[0];
}
"""


def elf(cc: str, tmp: Path) -> None:
    src = tmp / "elf.c"
    src.write_text(ELF_PROGRAM)
    out = tmp / "elf"
    subprocess.run([cc, "-Os", "-s", "-o", str(out), str(src)], check=True, capture_output=True)
    _put("fuzz_agent_elf", "pyruntime-and-usdt", out.read_bytes())


TARGET = """
def leaf(n):
    t = 0
    for i in range(n):
        t += i
    return t
def work():
    for _ in range(300):
        leaf(20000)
work()
"""


def py_spy(tool: str, tmp: Path) -> None:
    script = tmp / "spy_target.py"
    script.write_text(TARGET)
    for fmt, ext in (("speedscope", "speedscope.json"), ("raw", "folded")):
        out = tmp / f"spy.{ext}"
        subprocess.run(
            [
                tool,
                "record",
                "--rate",
                "200",
                "--format",
                fmt,
                "-o",
                str(out),
                "--",
                sys.executable,
                str(script),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        data = out.read_bytes()
        target = "fuzz_import_speedscope" if fmt == "speedscope" else "fuzz_import_folded"
        _put(target, f"py-spy.{ext}", data)
        _put("fuzz_import_any", f"py-spy.{ext}", data)


GO_PROGRAM = """package main

import (
\t"os"
\t"runtime/pprof"
)

func spin(n int) int {
\tt := 0
\tfor i := 0; i < n; i++ {
\t\tt += i * i
\t}
\treturn t
}

func main() {
\tf, _ := os.Create(os.Args[1])
\tpprof.StartCPUProfile(f)
\tt := 0
\tfor k := 0; k < 300; k++ {
\t\tt += spin(1000000)
\t}
\tpprof.StopCPUProfile()
\tf.Close()
\tprintln(t)
}
"""


def go(tool: str, tmp: Path) -> None:
    (tmp / "main.go").write_text(GO_PROGRAM)
    (tmp / "go.mod").write_text("module seed\n\ngo 1.21\n")
    out = tmp / "cpu.pprof"
    subprocess.run(
        [tool, "run", "main.go", str(out)], cwd=tmp, check=True, capture_output=True, timeout=300
    )
    data = out.read_bytes()
    _put("fuzz_import_pprof", "go-cpu.pb", gzip.decompress(data))
    _put("fuzz_import_any", "go-cpu.pb.gz", data)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--py-spy", default=shutil.which("py-spy"))
    ap.add_argument("--go", default=shutil.which("go"))
    ap.add_argument("--cc", default=shutil.which("gcc"))
    ap.add_argument(
        "--python3.14",
        dest="pythons",
        action="append",
        default=[],
        help="a CPython 3.14+ (repeat: 3.14, 3.14t, 3.15)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ours(tmp)
        store(tmp)
        agent_files()
        for python in args.pythons:
            pyruntime(python)
        for name, tool, make in (
            ("py-spy", args.py_spy, py_spy),
            ("go", args.go, go),
            ("gcc", args.cc, elf),
        ):
            if tool:
                make(tool, tmp)
            else:
                print(f"make_seeds: no {name}: its seeds are left as they are", file=sys.stderr)
        if not args.pythons:
            print(
                "make_seeds: no --python3.14: the _PyRuntime seeds are left as they are",
                file=sys.stderr,
            )
    for target in sorted(os.listdir(CORPUS)):
        files = list((CORPUS / target).iterdir())
        print(f"{target}: {len(files)} seeds, {sum(f.stat().st_size for f in files):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
