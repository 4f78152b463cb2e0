"""Disk requests per profile file for the durability schemes the background
writer could use (bench/RESULTS.md, "group commit for files").

Writes `--batches` batches of `--batch` 3 KB files through a temporary file
and rename each, with one of five durability schemes, and counts the block
device's interrupts (its `/proc/interrupts` lines, `--irq`) until a final
sync, so the kernel's later writeback is charged too. Linux only::

    python bench/fsync_batch.py --batch 30 --batches 10 --irq virtio1-req
"""

from __future__ import annotations

import argparse
import ctypes
import os
import tempfile
import time

SYNC_FILE_RANGE_WRITE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def interrupts(name: str) -> int:
    """Sum over CPUs of the /proc/interrupts lines whose name contains `name`."""
    total = 0
    with open("/proc/interrupts") as f:
        for line in f:
            if name in line:
                total += sum(int(x) for x in line.split()[1:] if x.isdigit())
    return total


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_batch(directory: str, start: int, batch: int, scheme: str, data: bytes) -> None:
    """One batch of files under `scheme`."""
    staged = []
    for k in range(start, start + batch):
        tmp = os.path.join(directory, f".p{k}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        if scheme == "each":  # the writer before: fsync, rename, fsync the directory, per file
            os.fsync(fd)
            os.close(fd)
            os.rename(tmp, os.path.join(directory, f"p{k}"))
            fsync_dir(directory)
            continue
        if scheme == "sfr_then_fsync":
            _libc.sync_file_range(fd, ctypes.c_int64(0), ctypes.c_int64(0), SYNC_FILE_RANGE_WRITE)
        staged.append((fd, tmp, k))
    if scheme in ("fsync_then", "sfr_then_fsync"):
        for fd, _, _ in staged:
            os.fsync(fd)
    if scheme == "syncfs" and staged:
        _libc.syncfs(staged[0][0])
    for fd, tmp, k in staged:
        os.close(fd)
        os.rename(tmp, os.path.join(directory, f"p{k}"))
    if scheme != "each" and scheme != "none":
        fsync_dir(directory)


def main() -> None:
    """Runs every scheme and prints wall time and interrupts per file."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--batch", type=int, default=30)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--irq", default="virtio1-req", help="the disk's name in /proc/interrupts")
    ap.add_argument(
        "--dir", default=None, help="where to write (default: a new directory under /tmp)"
    )
    args = ap.parse_args()
    directory = tempfile.mkdtemp(dir=args.dir or "/tmp")
    data = os.urandom(3000)
    k = 0
    for scheme in ("each", "fsync_then", "sfr_then_fsync", "syncfs", "none"):
        os.sync()
        time.sleep(0.2)
        irq0 = interrupts(args.irq)
        t0 = time.perf_counter()
        for _ in range(args.batches):
            write_batch(directory, k, args.batch, scheme, data)
            k += args.batch
        wall = time.perf_counter() - t0
        os.sync()
        n = args.batch * args.batches
        print(
            f"{scheme:15s} {wall / n * 1e6:7.0f} us/file  {(interrupts(args.irq) - irq0) / n:5.2f} interrupts/file"
        )


if __name__ == "__main__":
    main()
