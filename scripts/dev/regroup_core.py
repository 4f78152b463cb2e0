#!/usr/bin/env python3
"""Group userspace/core into stage folders (issue 43), idempotently.

The core's files move from userspace/core/ into model/, views/, analysis/,
formats/, render/, store/ and util/ (the table below; io.* becomes
model/summary.*), and every `#include "core/X.h"` (or a bare `#include "X.h"`
in userspace/core itself) under userspace/, pyext/, tests/cpp/ and bench/
becomes `#include "<folder>/X.h"`, relative to userspace/core. The source
list in userspace/core/CMakeLists.txt follows the moves.

Run it again at any time (after merging branches whose files still use the
old names): moved files stay where they are, rewritten lines stay as they
are. A file in userspace/core/ that the table does not name is placed by
its name's prefix (store_*, export_*, import_*, json_*, pprof_*, sched_*)
or, failing that, listed as unplaced and left alone.

  python3 scripts/dev/regroup_core.py            # move, rewrite includes and CMake
  python3 scripts/dev/regroup_core.py --dry-run  # say what would change
  python3 scripts/dev/regroup_core.py --mentions [PATH ...]
      # also rewrite text mentions "userspace/core/<old>" and "core/<old>"
      # (docs, comments) in the tracked files under PATHs (default: the
      # whole tree)
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "userspace" / "core"

# Old base name (without extension) -> new path (without extension),
# relative to userspace/core. Each entry covers the .h and the .cpp.
MOVES = {
    # model: events, the span tree, the profile's data types, resources, summaries
    "event": "model/event",
    "tree": "model/tree",
    "functions": "model/functions",
    "io": "model/summary",
    "resources": "model/resources",
    "resume": "model/resume",
    "span_value": "model/span_value",
    "stack_samples": "model/stack_samples",
    # views: what a reader sees of a profile and of many
    "view": "views/view",
    "edit": "views/edit",
    "group": "views/group",
    "merge": "views/merge",
    "waiting": "views/waiting",
    "path_stats": "views/path_stats",
    "function_stats": "views/function_stats",
    "stack_paths": "views/stack_paths",
    # analysis: findings over profiles and runs, the kernel join
    "bubbles": "analysis/bubbles",
    "changepoints": "analysis/changepoints",
    "trend": "analysis/trend",
    "run_compare": "analysis/run_compare",
    "run_values": "analysis/run_values",
    "sched": "analysis/sched",
    "sched_detail": "analysis/sched_detail",
    "sched_names": "analysis/sched_names",
    "sched_self": "analysis/sched_self",
    # formats: the profile document and every export and import
    "export": "formats/export",
    "export_chrome": "formats/export_chrome",
    "export_folded": "formats/export_folded",
    "export_html": "formats/export_html",
    "export_pprof": "formats/export_pprof",
    "export_speedscope": "formats/export_speedscope",
    "export_util": "formats/export_util",
    "import": "formats/import",
    "import_chrome": "formats/import_chrome",
    "import_json": "formats/import_json",
    "import_pprof": "formats/import_pprof",
    "import_speedscope": "formats/import_speedscope",
    "json_doc": "formats/json_doc",
    "json_read": "formats/json_read",
    "json_read_detail": "formats/json_read_detail",
    "json_read_sections": "formats/json_read_sections",
    "json_stream": "formats/json_stream",
    "pprof_aggregate": "formats/pprof_aggregate",
    "pprof_fields": "formats/pprof_fields",
    "pprof_writer": "formats/pprof_writer",
    # render: the text tree (the HTML report's assets: render/report/)
    "render_text": "render/render_text",
    # store: the relational profile store
    "store": "store/store",
    "store_copy": "store/store_copy",
    "store_scan": "store/store_scan",
    "store_schema": "store/store_schema",
    # util: files, strings, the background writer, errors as values
    "file_io": "util/file_io",
    "strings": "util/strings",
    "background_writer": "util/background_writer",
    "result": "util/result",
}
# Directories that move whole (the HTML report's templates).
DIR_MOVES = {"report": "render/report"}
# Generated headers (in the build's generated/ directory, not in the tree).
GENERATED = {"report_assets.h": "render/report_assets.h"}
# Files the table does not name go by their prefix.
PREFIXES = [
    ("store_", "store"),
    ("export_", "formats"),
    ("import_", "formats"),
    ("json_", "formats"),
    ("pprof_", "formats"),
    ("sched_", "analysis"),
]
EXTENSIONS = (".h", ".cpp")
# Where includes are rewritten.
INCLUDE_ROOTS = ["userspace", "pyext", "tests/cpp", "bench"]
SOURCE_SUFFIXES = {".cpp", ".h", ".c", ".cc", ".hpp"}
INCLUDE_RE = re.compile(r'^(\s*#\s*include\s+)"([^"]+)"(.*)$')


def log(msg: str) -> None:
    print(msg)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout


def place(base: str) -> str | None:
    """The new path (no extension, relative to userspace/core) of `base`."""
    if base in MOVES:
        return MOVES[base]
    for prefix, folder in PREFIXES:
        if base.startswith(prefix):
            return f"{folder}/{base}"
    return None


def move_files(dry: bool) -> dict[str, str]:
    """git mv the core's files; returns every known old file name -> new path."""
    names: dict[str, str] = dict(GENERATED)
    for base, new in MOVES.items():
        for ext in EXTENSIONS:
            names[base + ext] = new + ext
    unplaced = []
    for path in sorted(CORE.iterdir()):
        if not path.is_file() or path.suffix not in EXTENSIONS:
            continue
        new = place(path.stem)
        if new is None:
            unplaced.append(path.name)
            continue
        names[path.name] = new + path.suffix
        target = CORE / (new + path.suffix)
        if target.exists():
            sys.exit(f"regroup_core: both {path} and {target} exist: merge them by hand")
        log(f"move userspace/core/{path.name} -> userspace/core/{new}{path.suffix}")
        if not dry:
            target.parent.mkdir(parents=True, exist_ok=True)
            git("mv", str(path.relative_to(ROOT)), str(target.relative_to(ROOT)))
    for old, new in DIR_MOVES.items():
        src, dst = CORE / old, CORE / new
        if not src.is_dir():
            continue
        for f in sorted(p for p in src.rglob("*") if p.is_file()):
            to = dst / f.relative_to(src)
            if to.exists():
                sys.exit(f"regroup_core: both {f} and {to} exist: merge them by hand")
            log(f"move {f.relative_to(ROOT)} -> {to.relative_to(ROOT)}")
            if not dry:
                to.parent.mkdir(parents=True, exist_ok=True)
                if (
                    subprocess.run(
                        [
                            "git",
                            "-C",
                            str(ROOT),
                            "ls-files",
                            "--error-unmatch",
                            str(f.relative_to(ROOT)),
                        ],
                        capture_output=True,
                    ).returncode
                    == 0
                ):
                    git("mv", str(f.relative_to(ROOT)), str(to.relative_to(ROOT)))
                else:
                    f.rename(to)
        if not dry and src.is_dir() and not any(src.rglob("*")):
            src.rmdir()
    for name in unplaced:
        log(f"UNPLACED: userspace/core/{name} (add it to MOVES in {Path(__file__).name})")
    return names


def rewrite_includes(path: Path, names: dict[str, str], dry: bool) -> bool:
    """Rewrite one file's includes; sorts the include blocks it changed."""
    text = path.read_text()
    lines = text.split("\n")
    in_core = CORE in path.parents
    changed_at = set()
    for i, line in enumerate(lines):
        m = INCLUDE_RE.match(line)
        if not m:
            continue
        target = m.group(2)
        new = None
        if target.startswith("core/") and target[5:] in names:
            new = names[target[5:]]
        elif in_core and "/" not in target and target in names:
            # A bare name in the core: only if it is not a file beside it.
            if not (path.parent / target).exists():
                new = names[target]
        if new is not None and new != target:
            lines[i] = f'{m.group(1)}"{new}"{m.group(3)}'
            changed_at.add(i)
    if not changed_at:
        return False
    # Sort each run of quoted includes that holds a changed line (clang-format's
    # order within a block, IncludeBlocks: Preserve).
    i = 0
    while i < len(lines):
        if INCLUDE_RE.match(lines[i]):
            j = i
            while j < len(lines) and INCLUDE_RE.match(lines[j]):
                j += 1
            if any(k in changed_at for k in range(i, j)):
                lines[i:j] = sorted(lines[i:j], key=lambda s: INCLUDE_RE.match(s).group(2))
            i = j
        else:
            i += 1
    log(f"includes: {path.relative_to(ROOT)} ({len(changed_at)})")
    if not dry:
        path.write_text("\n".join(lines))
    return True


def rewrite_cmake(names: dict[str, str], dry: bool) -> None:
    """The source list and the report directory in userspace/core/CMakeLists.txt."""
    cmake = CORE / "CMakeLists.txt"
    text = cmake.read_text()
    out = []
    for line in text.split("\n"):
        m = re.match(r"^(\s+)([A-Za-z0-9_]+\.(?:cpp|h))(\s*(?:#.*)?)$", line)
        if m and m.group(2) in names:
            line = m.group(1) + names[m.group(2)] + m.group(3)
        out.append(line)
    new = "\n".join(out)
    # Includes are relative to userspace/core now (userspace/ stays: "agent/...").
    new = re.sub(
        r"target_include_directories\(mlprof_core PUBLIC \$\{PROJECT_SOURCE_DIR\}/userspace\)",
        "target_include_directories(mlprof_core PUBLIC ${CMAKE_CURRENT_SOURCE_DIR} "
        "${PROJECT_SOURCE_DIR}/userspace)",
        new,
    )
    for old, moved in GENERATED.items():
        new = new.replace("generated/core/" + old, "generated/" + moved)
    for old, moved in DIR_MOVES.items():
        new = re.sub(
            r"\$\{CMAKE_CURRENT_SOURCE_DIR\}/" + re.escape(old) + r"(?![\w/-])",
            "${CMAKE_CURRENT_SOURCE_DIR}/" + moved,
            new,
        )
    if new != text:
        log(f"cmake: {cmake.relative_to(ROOT)}")
        if not dry:
            cmake.write_text(new)


def rewrite_mentions(names: dict[str, str], paths: list[str], dry: bool) -> None:
    """Text mentions "userspace/core/<old>" in tracked files under `paths`."""
    table = {f"userspace/core/{old}": f"userspace/core/{new}" for old, new in names.items()}
    # "model/summary.h" (a comment's name for an include) becomes the include's new name.
    short = {f"core/{old}": new for old, new in names.items()}
    for old, new in DIR_MOVES.items():
        table[f"userspace/core/{old}/"] = f"userspace/core/{new}/"
    # A file's name must end there ("store.h" is not "store.html"); a
    # directory's ends with its slash.
    pattern = re.compile(
        "|".join(
            re.escape(k) + ("" if k.endswith("/") else r"(?![\w-])")
            for k in sorted(table, key=len, reverse=True)
        )
    )
    short_pattern = re.compile(
        r"(?<![\w/.-])(?:"
        + "|".join(re.escape(k) for k in sorted(short, key=len, reverse=True))
        + r")(?![\w-])"
    )
    files = git("ls-files", "-z", "--", *(paths or ["."])).split("\0")
    for rel in files:
        if not rel:
            continue
        path = ROOT / rel
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        new = pattern.sub(lambda m: table[m.group(0)], text)
        new = short_pattern.sub(lambda m: short[m.group(0)], new)
        if new != text:
            log(f"mentions: {rel}")
            if not dry:
                path.write_text(new)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    ap.add_argument(
        "--mentions",
        nargs="*",
        metavar="PATH",
        help="also rewrite text mentions userspace/core/<old> under PATHs",
    )
    args = ap.parse_args()
    names = move_files(args.dry_run)
    # Tracked files and new ones git does not ignore (not build directories).
    listed = git(
        "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *INCLUDE_ROOTS
    )
    for rel in sorted(set(listed.split("\0"))):
        path = ROOT / rel
        if rel and path.suffix in SOURCE_SUFFIXES and path.is_file():
            rewrite_includes(path, names, args.dry_run)
    rewrite_cmake(names, args.dry_run)
    if args.mentions is not None:
        rewrite_mentions(names, args.mentions, args.dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
