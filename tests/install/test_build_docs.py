"""docs/ebpf.md's "Build" commands, exactly as the doc writes them (read
from the doc, so the two cannot drift), run as root in a Podman container
on a clean Debian 12 root: debootstrap --variant=minbase and nothing else
(MLPROF_BUILD_ROOT; .ci/run makes it, and the wheel test's root from it),
with the network for apt, in a copy of the repository's files.
Checked: mlprof-ebpf is built and runs (--version, --help, every library
resolved), libbpf-dev's control file is kept where deploy/build-image.sh
reads it, and bpftool is the only package installed from
bookworm-backports (the old `-t bookworm-backports` line also took
linux-libc-dev from there).

The additions to the doc's lines, all outside them: DEBIAN_FRONTEND=
noninteractive and apt's Assume-Yes (the "Y" a person types); apt's
download cache kept under ~/.cache; and ccache, installed after the doc's
apt lines and set as CMake's compiler launcher through the environment,
with its cache MLPROF_BUILD_DOCS_CCACHE (.ci/run's, which its C++ build
filled; else one under ~/.cache), so that a run compiles only what differs
(a missing header or library still fails: ccache runs the compiler on any
miss, and configuring and linking are never cached). So that the compile
commands are CI's, byte for byte, the sources sit at the checkout's own
path in the container and ccache's base_dir is the build directory on both
sides (.ci/run sets it so): build-tree paths relative, the rest absolute;
the locale variables ccache hashes are passed in. On a fresh machine 58 of
the agent's 59 compiles then hit (bpf_loader.cpp misses: libbpf's headers
lie elsewhere; CMake's 3 configure checks, in scratch directories, miss
too) and the build lines take 16 s instead of 305 s.
The root after the doc's apt lines (everything before its `cmake` line) is
kept under ~/.cache/mlflow-profiler-tests/build-docs, keyed by the hash of
those lines (less comments) and at most MLPROF_BUILD_DOCS_MAX_AGE_DAYS (7)
days old: a changed command, or a week, runs them again from the clean
root (94-103 s on a fresh machine, downloads included). The `cmake` and
`ninja` lines run every time, on a throwaway overlay of it, in a fresh
build directory.

Needs root, podman and the network; without them it skips, or fails under
MLPROF_REQUIRE_BPF=1 (CI runs it as root)."""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time
from typing import Tuple

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "ebpf.md"
CACHE = pathlib.Path(os.path.expanduser("~/.cache/mlflow-profiler-tests/build-docs"))
MAX_AGE_S = float(os.environ.get("MLPROF_BUILD_DOCS_MAX_AGE_DAYS", "7")) * 86400
PODMAN = [
    "podman",
    "run",
    "--rm",
    "--runtime",
    "runc",
    "--network",
    "host",
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
]
# What a person at the terminal answers; not part of the doc's commands.
PRELUDE = (
    "set -euxo pipefail\nexport DEBIAN_FRONTEND=noninteractive\n"
    "echo 'APT::Get::Assume-Yes \"true\";' > /etc/apt/apt.conf.d/90mlprof-test-assume-yes\n"
)
# After the doc's apt lines: a compiler cache for the build lines (not the doc's).
CCACHE_SETUP = "apt-get install ccache\n"
# base_dir: the doc's build directory, as .ci/run's C++ build sets its own
# (relative there, `userspace/core/generated` on both sides; the sources,
# at the same path, absolute). The stats log counts this build's hits alone.
CCACHE_ENV = (
    "export CCACHE_DIR=/ccache CCACHE_BASEDIR={src}/build CCACHE_STATSLOG=/tmp/ccache-stats.log "
    "CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache\n"
)
# What ccache hashes from the environment besides its own settings.
LOCALE = ("LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES")


def require(ok: bool, why: str) -> None:
    if ok:
        return
    if os.environ.get("MLPROF_REQUIRE_BPF") == "1":
        pytest.fail(f"{why}; required here (MLPROF_REQUIRE_BPF=1)")
    pytest.skip(why)


def doc_commands() -> Tuple[str, str]:
    """The doc's Build block as (the apt lines, the cmake and ninja lines):
    the first ```sh block after "## Build", split at its first cmake line."""
    text = DOC.read_text()
    section = text[text.index("\n## Build\n") :]
    m = re.search(r"\n```sh\n(.*?)\n```\n", section, re.S)
    assert m, "docs/ebpf.md's Build section has no ```sh block"
    lines = m.group(1).split("\n")
    first_cmake = next(i for i, l in enumerate(lines) if l.startswith("cmake "))
    return "\n".join(lines[:first_cmake]) + "\n", "\n".join(lines[first_cmake:]) + "\n"


def test_the_block_is_what_the_checks_expect():
    """Runs without root: the block has the lines the container test relies on."""
    setup, build = doc_commands()
    assert "apt-get update" in setup and "bookworm-backports.sources" in setup
    assert "apt-get install bpftool/bookworm-backports" in setup
    assert "-t bookworm-backports" not in setup.replace("`-t bookworm-backports`", "")
    for pkg in ("libpq-dev", "libcurl4-openssl-dev", "libsqlite3-dev", "libelf-dev"):
        assert re.search(rf"\b{re.escape(pkg)}\b", setup), pkg
    assert "ninja -C build mlprof-ebpf" in build


def source_tree(dest: pathlib.Path) -> None:
    """The repository's files as a commit of the working tree would hold them
    (tracked and new files, not what .gitignore leaves out) in `dest`: no
    build directory of this checkout leaks in."""
    files = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for rel in (f.decode() for f in files if f):
        src = REPO / rel
        if src.is_file() or src.is_symlink():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel, follow_symlinks=False)


def container(root: str, script: str, *extra: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PODMAN, *extra, "--rootfs", root, "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def provisioned() -> pathlib.Path:
    """The clean root after the doc's apt lines: cached by their hash."""
    bare = os.environ.get("MLPROF_BUILD_ROOT", "")
    require(os.geteuid() == 0, "a Podman container on a given root needs root")
    require(shutil.which("podman") is not None, "podman is needed (apt-get install podman)")
    require(
        bool(bare) and (pathlib.Path(bare) / "usr/bin/apt-get").exists(),
        "MLPROF_BUILD_ROOT: a clean Debian 12 root (debootstrap --variant=minbase bookworm; .ci/run makes one)",
    )
    setup, _ = doc_commands()
    commands = "\n".join(
        l for l in (PRELUDE + setup + CCACHE_SETUP).splitlines() if not l.startswith("#")
    )
    key = hashlib.sha256(commands.encode()).hexdigest()[:16]  # a comment's edit keeps the root
    root = CACHE / f"root-{key}"
    stamp = root.with_suffix(".done")
    if stamp.exists() and time.time() - stamp.stat().st_mtime < MAX_AGE_S:
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    for old in CACHE.glob("root-*"):  # one cached root at a time, and no half-made one
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()
    work = pathlib.Path(tempfile.mkdtemp(prefix="root-", suffix=".tmp", dir=CACHE))
    subprocess.run(["cp", "-a", f"{bare}/.", str(work)], check=True)
    archives = CACHE / "apt-archives"
    (archives / "partial").mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    r = container(
        str(work),
        PRELUDE + setup + CCACHE_SETUP,
        "-v",
        f"{archives}:/var/cache/apt/archives",
        timeout=1800,
    )
    assert (
        r.returncode == 0
    ), f"the doc's apt lines failed on a clean root:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    work.rename(root)
    stamp.write_text(f"{time.monotonic() - t0:.0f} s\n")
    return root


def test_the_docs_build_lines_build_the_agent_on_a_clean_debian_root(provisioned, tmp_path):
    _, build = doc_commands()
    src = tmp_path / "src"
    source_tree(src)
    script = (
        PRELUDE
        + CCACHE_ENV.format(src=REPO)
        + f"cd {REPO}\n"
        + build
        + "echo '--- checks (not the doc) ---'\n"
        "ccache --show-log-stats\n"
        "build/userspace/agent/mlprof-ebpf --version\n"
        "build/userspace/agent/mlprof-ebpf --help > /dev/null\n"
        "! ldd build/userspace/agent/mlprof-ebpf | grep 'not found'\n"
        # the control file deploy/build-image.sh names libbpf-dev from
        "grep -x 'Version: 1:1.4.6-1~bpo12+1' /opt/libbpf-1.4.6/DEBIAN/control\n"
        "echo '--- packages ---'\n"
        "dpkg-query -W -f '${Package} ${Version}\\n'\n"
    )
    ccache = pathlib.Path(os.environ.get("MLPROF_BUILD_DOCS_CCACHE") or CACHE / "ccache")
    if ccache == CACHE / "ccache":  # ours, not CI's: bounded
        ccache.mkdir(parents=True, exist_ok=True)
        if not (ccache / "ccache.conf").exists():
            (ccache / "ccache.conf").write_text("max_size = 500M\n")
    locale = [a for v in LOCALE if v in os.environ for a in ("-e", v)]
    t0 = time.monotonic()
    r = container(
        f"{provisioned}:O",
        script,
        "-v",
        f"{src}:{REPO}",
        "-v",
        f"{ccache}:/ccache",
        *locale,
        timeout=3600,
    )
    took = time.monotonic() - t0
    assert (
        r.returncode == 0
    ), f"the doc's build lines failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    out = r.stdout
    assert re.search(r"^mlprof-ebpf \d+\.\d+\.\d+$", out, re.M), out[-2000:]
    packages = dict(
        line.split(" ", 1)
        for line in out.split("--- packages ---\n", 1)[1].splitlines()
        if " " in line
    )
    from_backports = sorted(p for p, v in packages.items() if "bpo" in v)
    assert from_backports == ["bpftool"], from_backports
    assert re.match(r"7\.[5-9]", packages["bpftool"]), packages["bpftool"]
    for pkg in ("libpq-dev", "libcurl4-openssl-dev", "linux-libc-dev"):
        assert pkg in packages and "bpo" not in packages[pkg], (pkg, packages.get(pkg))
    stats = out.split("--- checks (not the doc) ---\n", 1)[1].split("mlprof-ebpf ", 1)[0]
    print(f"the doc's cmake and ninja lines: {took:.0f} s; ccache:\n{stats}")
