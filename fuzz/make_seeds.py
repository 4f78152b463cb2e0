"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/) from real
outputs: a small model profiled in every format save() writes, and, where
the tools are installed, py-spy's two formats of a real process and a Go
program's CPU profile. Run it with the package importable; the seeds are
committed, so the fuzzers start from the same files everywhere.

    python fuzz/make_seeds.py [--py-spy PATH] [--go PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
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
    if len(data) > MAX_SEED:
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ours(tmp)
        for name, tool, make in (("py-spy", args.py_spy, py_spy), ("go", args.go, go)):
            if tool:
                make(tool, tmp)
            else:
                print(f"make_seeds: no {name}: its seeds are left as they are", file=sys.stderr)
    for target in sorted(os.listdir(CORPUS)):
        files = list((CORPUS / target).iterdir())
        print(f"{target}: {len(files)} seeds, {sum(f.stat().st_size for f in files):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
