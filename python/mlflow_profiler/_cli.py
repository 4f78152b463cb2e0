"""`mlprof`: profiles that accumulate and answer questions (docs/store.md).

    mlprof add STORE FILE... [--source-type T] [--uri U] [--label k=v]... [--allow-duplicate]
                                         (documents, pprof, py-spy raw or speedscope, Chrome traces)
    mlprof rm STORE ID...                (sources deleted with all their rows, in one transaction)
    mlprof show STORE [SOURCE] [--depth N] [--format text|json]
    mlprof top STORE|FILE... [--where k=v]... [--depth N] [--by path|function] [--limit N] [--format text|json] [--html OUT]
    mlprof diff A B [--where-a k=v] [--where-b k=v] [--run-by KEY] [--statistic S] [--threshold PCT] ...
                                         (exit 0 pass, 1 regression, 2 error, 3 inconclusive)
    mlprof trend STORE [--by version|KEY] [--where k=v]... [--format text|json] [--html OUT]
                                         (change points by release; exit 0, 1, 2, 3 as diff)
    mlprof bubbles STORE|FILE... [--where k=v]... [--min-ms MS] [--format text|json]
    mlprof combine OUT STORE|FILE...     (sources copied with their provenance)
    mlprof convert INPUT OUTPUT [--source ID]   (a document or a store's source to any format)
    mlprof migrate STORE                 (a store of an older version, brought up to date)
    mlprof convert STORE OUT.pb.gz [--where k=v]... [--source ID]... [--label-by KEY]...
                                         (one pprof aggregating the selected sources)

STORE is a path (SQLite), `sqlite:///path` or `postgresql://...`. Only add and
combine create a store; every other command needs one that is there.
Exit status: 0 done (also for a file add finds already in the store), 1 a
regression (diff, trend), 2 an input or usage error (a file that cannot be
read, each added whole or not at all; a store missing, unreachable or
corrupt; an empty selection; a bad option), 3 inconclusive (diff, trend).
A closed output pipe (`mlprof top ... | head`) ends quietly: the rest of the
output is dropped and the status is the command's own (diff's verdict stays).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from typing import List, Optional

from ._core import format_duration
from ._files import ProfileLoadError
from .store import StoreError, _one_line, open_store


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _labels(pairs: List[str], option: str = "--label") -> dict:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            print(f"mlprof: {option} takes KEY=VALUE, got {pair!r}", file=sys.stderr)
            raise SystemExit(2)  # usage, as argparse exits
        out[key] = value
    return out


def _add(args) -> int:
    from .store import DuplicateSource

    labels = _labels(args.label)
    failed = 0
    with open_store(args.store) as store:
        for path in args.files:
            try:
                source = store.add(
                    path,
                    source_type=args.source_type,
                    uri=args.uri,
                    labels=labels,
                    allow_duplicate=args.allow_duplicate,
                )
            except DuplicateSource as dup:
                print(
                    f"{path}: already in the store as source {dup.source_id} (the same content); not added "
                    "(--allow-duplicate adds it again)"
                )
                continue
            except (ProfileLoadError, OSError) as exc:
                print(f"mlprof: {path}: not added: {exc}", file=sys.stderr)
                failed += 1
                continue
            row = next(s for s in store.sources() if s["source_id"] == source)
            unit = "span" if row["kind"] == "spans" else "sampled stack"
            print(
                f"{path}: source {source} ({row['source_type']}), {_plural(row['spans'], unit)} in "
                f"{_plural(row['sessions'], 'session')}"
            )
    return 2 if failed else 0


def _rm(args) -> int:
    with open_store(args.store, create=False) as store:
        removed = store.remove(args.ids)
        left = len(store.sources())
    print(
        f"{args.store}: {_plural(len(set(args.ids)), 'source')} removed with {removed:,} spans or samples, "
        f"{_plural(left, 'source')} left"
    )
    return 0


def _when(unix_ns) -> str:
    if not unix_ns:
        return "-"
    return datetime.datetime.fromtimestamp(unix_ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def _show_stacks(samples, args) -> int:
    """Sampled stacks: per thread, the hottest leaf stacks with their share of samples."""
    stacks = samples.stacks()
    if args.format == "json":
        print(
            json.dumps(
                {
                    "value_types": samples.value_types,
                    "threads": samples.threads,
                    "samples": [{"thread": t, "frames": f, "values": v} for t, f, v in stacks],
                }
            )
        )
        return 0
    types = ", ".join(f"{t} ({u})" for t, u in samples.value_types)
    print(
        f"{_plural(samples.sample_count, 'sample')} of {_plural(len(samples.threads), 'thread')}; values: {types}"
    )
    weights = samples.weights()  # a pre-aggregated sample stands for its count
    for thread in samples.threads:
        counts: dict = {}
        for (t, frames, _), weight in zip(stacks, weights):
            if t == thread:
                key = tuple(frames if args.depth is None else frames[: args.depth + 1])
                counts[key] = counts.get(key, 0) + weight
        total = sum(counts.values())
        print(f"thread {thread}: {_plural(total, 'sample')}")
        for key, n in sorted(counts.items(), key=lambda kv: -kv[1])[:10]:
            print(
                f"  {100.0 * n / total if total else 0.0:5.1f}%  {' > '.join(key) or '(no frames)'}"
            )
    return 0


def _show(args) -> int:
    with open_store(args.store, create=False) as store:
        if args.source is not None:
            kind = next(
                (s["kind"] for s in store.sources() if s["source_id"] == args.source), "spans"
            )
            if kind == "stacks":
                return _show_stacks(store.load_stacks(args.source), args)
            session = store.load(args.source)
            if args.format == "json":
                print(session.to_json(depth=args.depth))
            else:
                print(session.format_tree(depth=args.depth).rstrip("\n"))
            return 0
        sources = store.sources()
        if args.format == "json":
            print(json.dumps(sources, indent=2))
            return 0
        total = sum(s["spans"] for s in sources)
        print(f"{args.store}: {_plural(len(sources), 'source')}, {_plural(total, 'span')}")
        if not sources:
            return 0
        header = (
            "id",
            "type",
            "tool",
            "captured",
            "model",
            "version",
            "host",
            "pid",
            "spans",
            "duration",
        )
        rows = [
            (
                str(s["source_id"]),
                s["source_type"],
                s["tool"] or "-",
                _when(s["captured_unix_ns"]),
                s["model"] or "-",
                s["version"] or "-",
                s["host"] or "-",
                str(s["pid"] or "-"),
                f"{s['spans']:,}" if s["kind"] == "spans" else f"{s['spans']:,} samples",
                format_duration(s["duration_ns"]) if s["duration_ns"] else "-",
            )
            for s in sources
        ]
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        for row in (header, *rows):
            print(
                "  ".join(
                    c.rjust(w) if i in (0, 7, 8, 9) else c.ljust(w)
                    for i, (c, w) in enumerate(zip(row, widths))
                ).rstrip()
            )
    return 0


def _top(args) -> int:
    from . import analysis

    result = analysis.top(
        args.inputs, where=_labels(args.where, "--where"), depth=args.depth, by=args.by
    )
    if (
        result.sessions == 0 and result.sampled is None
    ):  # an empty selection is an error, not an empty table
        where = "".join(f" --where {w}" for w in args.where)
        print(
            f"mlprof top: no profile in {', '.join(args.inputs)}{' matches' + where if where else ''} "
            "(mlprof show lists a store's sources)",
            file=sys.stderr,
        )
        return 2
    if args.format == "json":
        print(result.to_json())
    else:
        print(result.to_text(limit=args.limit), end="")
    if args.html:
        result.write_html(args.html, inputs=args.inputs)
        what = "call path" if args.by == "path" else "function"
        # A page by function shows the sampled stacks' functions when there are no spans.
        only_sampled = args.by == "function" and not result.sessions and result.sampled is not None
        rows = (
            len(result.sampled.rows)
            if only_sampled and result.sampled is not None
            else len(result.rows)
        )
        print(f"{args.html}: HTML page of {_plural(rows, what)}", file=sys.stderr)
    return 0


def _side(target: str, where: List[str]) -> str:
    """A side of a diff as its page's title names it: `profiles.db (version=2)`."""
    return f"{target} ({', '.join(where)})" if where else target


def _diff(args) -> int:
    """Exit 0 pass, 1 regression, 2 the sides cannot be compared, 3 inconclusive."""
    from . import analysis

    try:
        result = analysis.diff(
            [args.a],
            [args.b],
            where_a=_labels(args.where_a, "--where-a"),
            where_b=_labels(args.where_b, "--where-b"),
            run_by=args.run_by,
            statistic=args.statistic,
            quantity=args.quantity,
            threshold=args.threshold,
            confidence=args.confidence,
            min_share=args.min_share,
            min_time_us=args.min_time_us,
            depth=args.depth,
        )
    except analysis.DiffError as exc:
        print(f"mlprof diff: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(result.to_json())
    else:
        print(result.to_text(limit=args.limit), end="")
    if args.html:
        result.write_html(args.html, a=_side(args.a, args.where_a), b=_side(args.b, args.where_b))
        print(
            f"{args.html}: HTML page of {_plural(len(result.paths), 'call path')}, verdict {result.verdict}",
            file=sys.stderr,
        )
    return result.exit_code


def _bubbles(args) -> int:
    from . import analysis

    try:
        result = analysis.bubbles(
            args.inputs, where=_labels(args.where, "--where"), min_ms=args.min_ms
        )
    except analysis.AnalysisError as exc:
        print(f"mlprof bubbles: {exc}", file=sys.stderr)
        return 2
    print(
        result.to_json() if args.format == "json" else result.to_text(),
        end="" if args.format != "json" else "\n",
    )
    if any(not s["wait_data"] for s in result.sessions):
        print(
            "mlprof bubbles: a session has no waiting data, so its bubbles cannot be told (exit 3)",
            file=sys.stderr,
        )
        return 3
    return 0


def _combine(args) -> int:
    """All or nothing: the copies are one transaction, and an OUT file this
    command created is removed when it fails (an existing one is left as it
    was)."""
    from . import analysis
    from .store import LABEL_PREFIX, DuplicateSource, _sqlite_path

    is_file = not args.out.startswith(("postgresql://", "postgres://"))
    out_path = _sqlite_path(args.out) if is_file else ""
    new_file = is_file and not os.path.exists(out_path)
    added = same = 0
    try:
        with open_store(args.out, create=True) as out, out.batch():
            for item in args.inputs:
                for target in analysis._expand(item):
                    try:
                        if analysis._is_store(target):
                            with open_store(target, create=False) as src:
                                for row in src.sources():
                                    labels = {
                                        k[len(LABEL_PREFIX) :]: v
                                        for k, v in src.labels(row["source_id"]).items()
                                        if k.startswith(LABEL_PREFIX)
                                    }
                                    read = src.load_stacks if row["kind"] == "stacks" else src.load
                                    try:
                                        out.add(
                                            read(row["source_id"]),
                                            source_type=row["source_type"],
                                            uri=row["uri"] or target,
                                            labels=labels,
                                            content_hash=row["content_hash"],
                                            allow_duplicate=args.allow_duplicate,
                                        )
                                        added += 1
                                    except DuplicateSource:
                                        same += 1
                        else:
                            out.add(
                                target,
                                uri=os.path.abspath(target),
                                allow_duplicate=args.allow_duplicate,
                            )
                            added += 1
                    except DuplicateSource:
                        same += 1
            total = len(out.sources())
    except BaseException:
        if new_file:
            for leftover in (out_path, out_path + "-wal", out_path + "-shm"):
                if os.path.exists(leftover):
                    os.unlink(leftover)
        raise
    print(
        f"{args.out}: {_plural(added, 'source')} added, {_plural(total, 'source')} in all"
        + (
            f"; {_plural(same, 'source')} already there (the same content), not added"
            if same
            else ""
        )
    )
    return 0


def _convert(args) -> int:
    from . import analysis
    from ._files import load

    pprof = args.output.endswith(".pb.gz")
    if not analysis._is_store(args.input):
        if args.source or args.where or args.label_by:
            print(
                "mlprof: --source, --where and --label-by select a store's sources; "
                f"{args.input} is a profile document",
                file=sys.stderr,
            )
            return 2
        print(load(args.input).save(args.output))
        return 0
    with open_store(args.input, create=False) as store:
        one_span_source = (
            len(args.source) == 1
            and not args.where
            and not args.label_by
            and next(
                (s["kind"] for s in store.sources() if s["source_id"] == args.source[0]), "spans"
            )
            == "spans"
        )
        if one_span_source or not pprof:
            # One source in any format, as it was captured (pprof: a sample per span).
            if len(args.source) != 1 or args.where or args.label_by:
                print(
                    "mlprof: only a .pb.gz output aggregates several sources; for another format name one "
                    "source with --source ID (mlprof show lists them)",
                    file=sys.stderr,
                )
                return 2
            print(store.load(args.source[0]).save(args.output))
            return 0
        written = store.export_pprof(
            args.output,
            args.source or None,
            where=_labels(args.where, "--where"),
            label_by=args.label_by,
        )
    types = ", ".join(f"{t}/{u}" for t, u in written["sample_types"])
    print(
        f"{args.output}: {_plural(written['sources'], 'source')} aggregated into "
        f"{_plural(written['samples'], 'sample')}; sample types {types}"
    )
    return 0


def _migrate(args) -> int:
    from .store import migrate

    before, after = migrate(args.store)
    print(
        f"{args.store}: already at store version {after}"
        if before == after
        else f"{args.store}: store version {before} -> {after}"
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlprof", description="Profiles that accumulate and answer questions."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add = sub.add_parser(
        "add",
        help="add profiles to a store: ours, pprof, py-spy, speedscope, Chrome traces",
        description="Adds each file as one source, in its own transaction, recognised by its content: a profile "
        "document (.json, .json.gz), pprof (.pb.gz or plain: Go's, ours), py-spy's raw (folded "
        "stacks) or speedscope output, other speedscope files, a Chrome trace (viztracer, Perfetto's "
        "JSON). A file whose content the store already has is said and not added (exit 0). Exit 2 "
        "when a file cannot be read (it adds nothing; the others are added).",
    )
    add.add_argument(
        "store", help="a SQLite file (created if missing), sqlite:///path or postgresql://..."
    )
    add.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="profile documents, pprof, py-spy raw or speedscope, Chrome trace JSON",
    )
    add.add_argument(
        "--source-type",
        default=None,
        help="the source's type (default: read from the file: in-process, ebpf, pprof, speedscope, "
        "folded, chrome-trace)",
    )
    add.add_argument(
        "--uri", default=None, help="where the profile came from (default: the file's path)"
    )
    add.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="provenance to filter on later: model=fraud, version=3 (repeatable)",
    )
    add.add_argument(
        "--allow-duplicate",
        action="store_true",
        help="add a file even when a source of the store has the same content (sha256)",
    )
    add.set_defaults(run=_add)
    rm = sub.add_parser(
        "rm",
        help="delete sources and all their rows",
        description="Deletes the sources with their sessions, spans or samples, values, I/O and "
        "kernel data in one transaction (nothing when an id is not there: exit 2).",
    )
    rm.add_argument("store", help="a store (it must exist)")
    rm.add_argument(
        "ids", nargs="+", type=int, metavar="ID", help="source ids (mlprof show lists them)"
    )
    rm.set_defaults(run=_rm)
    show = sub.add_parser("show", help="list a store's sources, or print one as a tree")
    show.add_argument("store")
    show.add_argument("source", nargs="?", type=int, help="a source id: print its tree")
    show.add_argument(
        "--depth",
        type=int,
        default=None,
        help="render the tree to this depth; sampled stacks: deeper frames fold into their ancestor",
    )
    show.add_argument("--format", choices=("text", "json"), default="text")
    show.set_defaults(run=_show)
    top = sub.add_parser(
        "top", help="the bottlenecks: call paths (or functions: --by function) ranked by self time"
    )
    top.add_argument("inputs", nargs="+", metavar="STORE|FILE", help="stores and profile documents")
    top.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only sources whose model, version, run_id, host, type, label or meta matches",
    )
    top.add_argument(
        "--depth",
        type=int,
        default=None,
        help="fold deeper paths into their ancestors (calls and sampled stacks alike)",
    )
    top.add_argument(
        "--by",
        choices=("path", "function"),
        default="path",
        help="rank call paths (default) or functions: flat and cumulative time, as pprof's -top",
    )
    top.add_argument("--limit", type=int, default=20, help="rows to print (default 20)")
    top.add_argument("--format", choices=("text", "json"), default="text")
    top.add_argument(
        "--html",
        metavar="OUT.html",
        default=None,
        help="also write every path to a self-contained HTML page (sortable)",
    )
    top.set_defaults(run=_top)
    diff = sub.add_parser(
        "diff",
        help="a release gate: compare two sets of runs path by path",
        description="Compares the runs of A and B path by path and decides: exit 0 pass, "
        "1 regression, 2 the inputs cannot be compared, 3 inconclusive (too few "
        "runs or too noisy; the output says how many runs would tell).",
    )
    diff.add_argument(
        "a",
        metavar="A",
        help="the baseline: a store, a profile document, a directory of them, or an MLflow run id",
    )
    diff.add_argument("b", metavar="B", help="the candidate, the same way")
    diff.add_argument(
        "--where-a", action="append", default=[], metavar="KEY=VALUE", help="select A's sources"
    )
    diff.add_argument(
        "--where-b", action="append", default=[], metavar="KEY=VALUE", help="select B's sources"
    )
    diff.add_argument(
        "--run-by",
        default="source",
        metavar="KEY",
        help="what one run is: source (each store source or document; default) or a key whose value "
        "groups sources (pid, a label such as job, a meta key)",
    )
    diff.add_argument(
        "--statistic",
        choices=("mean", "p50", "p95"),
        default="p50",
        help="per run, over its root calls, of each path's time per root call (default p50; mean for a "
        "step in fewer than half the root calls)",
    )
    diff.add_argument(
        "--quantity",
        choices=("wall", "cpu"),
        default="wall",
        help="gate on wall time (default) or CPU time (cpu_time=True, or the agent's on-CPU time)",
    )
    diff.add_argument(
        "--threshold",
        "--fail-on-regression",
        dest="threshold",
        type=float,
        default=10.0,
        metavar="PCT",
        help="a gated path slower by more than PCT%% (significant) is a regression " "(default 10)",
    )
    diff.add_argument(
        "--min-share",
        type=float,
        default=5.0,
        metavar="PCT",
        help="gate paths of at least PCT%% of their root's time (default 5; roots always)",
    )
    diff.add_argument(
        "--min-time-us",
        type=float,
        default=20.0,
        metavar="US",
        help="and of at least US microseconds per root call (default 20)",
    )
    diff.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="of the intervals; the tests' level is 1 - it",
    )
    diff.add_argument("--depth", type=int, default=None, help="compare paths down to this depth")
    diff.add_argument("--limit", type=int, default=20, help="rows to print (default 20)")
    diff.add_argument("--format", choices=("text", "json"), default="text")
    diff.add_argument(
        "--html",
        metavar="OUT.html",
        default=None,
        help="also write every path to a self-contained HTML page, regressions marked",
    )
    diff.set_defaults(run=_diff)
    from ._trend import add_parser as add_trend  # its options live with it

    add_trend(sub)
    bub = sub.add_parser("bubbles", help="idle gaps in sessions, and how busy their fan-outs were")
    bub.add_argument("inputs", nargs="+", metavar="STORE|FILE")
    bub.add_argument("--where", action="append", default=[], metavar="KEY=VALUE")
    bub.add_argument("--min-ms", type=float, default=1.0, help="shortest gap reported (1 ms)")
    bub.add_argument("--format", choices=("text", "json"), default="text")
    bub.set_defaults(run=_bubbles)
    comb = sub.add_parser("combine", help="copy the sources of stores and files into one store")
    comb.add_argument(
        "out", help="the store to add to (created if missing; removed again if the command fails)"
    )
    comb.add_argument("inputs", nargs="+", metavar="STORE|FILE")
    comb.add_argument(
        "--allow-duplicate",
        action="store_true",
        help="copy a source even when OUT has one of the same content (sha256 of its file)",
    )
    comb.set_defaults(run=_combine)
    conv = sub.add_parser(
        "convert",
        help="write a profile (a document, or a store's source) in another format; "
        "or one pprof aggregating a store's sources",
    )
    conv.add_argument("input", help="a profile document or a store")
    conv.add_argument(
        "output",
        help="the file to write; its extension names the format "
        "(.json, .json.gz, .pb.gz, .speedscope.json, .trace.json, .folded, .html)",
    )
    conv.add_argument(
        "--source",
        type=int,
        action="append",
        default=[],
        metavar="ID",
        help="the store's source to write (repeatable for .pb.gz: aggregated)",
    )
    conv.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=".pb.gz: aggregate the sources whose model, version, run_id, host, type, label or meta "
        "matches (repeatable; all must match)",
    )
    conv.add_argument(
        "--label-by",
        action="append",
        default=[],
        metavar="KEY",
        help=".pb.gz: label each sample with its source's KEY (source, model, version ...), keeping "
        "sources apart; by default they merge",
    )
    conv.set_defaults(run=_convert)
    mig = sub.add_parser(
        "migrate", help="bring a store written by an older mlflow-profiler to this version"
    )
    mig.add_argument("store")
    mig.set_defaults(run=_migrate)
    return parser


# Commands that only read stores: no store they name is created.
_READ_ONLY = ("show", "top", "diff", "bubbles", "convert", "trend", "migrate", "rm")


class _PipeSafeStdout:
    """sys.stdout for a command's run: once the reader has closed the pipe
    (`mlprof top ... | head`), the rest of the output goes to /dev/null
    instead of raising BrokenPipeError, so the command ends as it would
    have (diff's verdict is its exit status still) and prints no error."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def _closed(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._closed()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._closed()
            self._stream.flush()  # what was buffered, to /dev/null

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv: Optional[List[str]] = None) -> int:
    """The `mlprof` console script. Exit status: 0 done, 1 a regression
    (diff, trend), 2 an input or usage error, 3 inconclusive (diff, trend).
    A closed output pipe ends quietly with the command's own status."""
    from . import store as _store

    args = _parser().parse_args(argv)
    token = _store.creating.set(args.command not in _READ_ONLY)
    stdout = sys.stdout
    sys.stdout = _PipeSafeStdout(stdout)
    try:
        code = args.run(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:  # written past the proxy: the status cannot be told
        _PipeSafeStdout(stdout)._closed()
        return 141  # as a shell reports a command SIGPIPE ended
    except (StoreError, ProfileLoadError, OSError) as exc:
        print(f"mlprof: {_one_line(exc)}", file=sys.stderr)
        return 2
    finally:
        sys.stdout = stdout
        _store.creating.reset(token)


if __name__ == "__main__":
    sys.exit(main())
