"""Store hygiene (issue 41, item 7; docs/store.md): the same file added twice
is said and added once; `mlprof rm` deletes a source with every row of its;
read-only commands create no file and a failed combine leaves no output;
option errors name the option; every output has one file mode; sampled
stacks fold at --depth; help texts are current; a closed pipe ends quietly.
Real SQLite files and real processes (`python -m mlflow_profiler._cli`);
PostgreSQL's side is in test_store_postgres.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from test_store import _connect, _document, _encode, _mlprof, _predict, _waiting_agent_document

from mlflow_profiler import _cli, profiling
from mlflow_profiler._files import loads
from mlflow_profiler.store import DuplicateSource, StoreError, open_store

FOLDED = "main;predict;encode 6\nmain;load 10\nmain 2\n"


def _main(capsys, *argv):
    """`mlprof ARGV` in this process (what the console script runs:
    sys.exit(main())): its exit status, stdout and stderr. Quicker than a
    process for the many cases below; the process tests are the others."""
    try:
        code = _cli.main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's and _labels' usage errors
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def _session(n=3):
    with profiling(depth=-1) as session:
        _encode(list(range(3, 3 + n)))
    return session


def test_the_same_file_twice_is_said_and_added_once(tmp_path):
    db = tmp_path / "dup.db"
    doc = _session().save(tmp_path / "predict.json")
    folded = tmp_path / "spy.folded"
    folded.write_text(FOLDED)
    run = _mlprof("add", db, doc, folded)
    assert run.returncode == 0, run.stderr
    again = _mlprof("add", db, folded, doc)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        f"{folded}: already in the store as source 2 (the same content); not added (--allow-duplicate adds it again)",
        f"{doc}: already in the store as source 1 (the same content); not added (--allow-duplicate adds it again)",
    ]
    with open_store(db) as store:
        assert len(store.sources()) == 2
        with pytest.raises(DuplicateSource) as err:
            store.add(doc)
        assert err.value.source_id == 1 and err.value.kind == "duplicate"
    # A copy elsewhere is the same content; a changed byte is not.
    copy = tmp_path / "copy.folded"
    copy.write_text(FOLDED)
    changed = tmp_path / "changed.folded"
    changed.write_text(FOLDED.replace("10", "11"))
    run = _mlprof("add", db, copy, changed)
    assert run.returncode == 0 and "already in the store as source 2" in run.stdout.splitlines()[0]
    assert run.stdout.splitlines()[1].startswith(f"{changed}: source 3 (folded)")
    run = _mlprof("add", db, copy, "--allow-duplicate")
    assert run.returncode == 0 and run.stdout.startswith(f"{copy}: source 4 (folded)"), run.stdout
    with open_store(db) as store:
        rows = store.sources()
        assert [r["source_id"] for r in rows] == [1, 2, 3, 4]
        assert rows[1]["content_hash"] == rows[3]["content_hash"] != rows[2]["content_hash"]
    # combine copies the hash: the same store twice adds its sources once
    # (and the duplicate that --allow-duplicate let in, once).
    out = tmp_path / "out.db"
    run = _mlprof("combine", out, db, db)
    assert run.returncode == 0 and run.stdout == (
        f"{out}: 3 sources added, 3 sources in all; 5 sources already there (the same content), not added\n"
    ), run


def _rows_of(conn, source_id, sample_ids):
    """Every row of one source, by table: what rm must take away."""
    lo, hi = min(sample_ids), max(sample_ids)
    by_sample = {
        t: conn.execute(
            f"SELECT count(*) FROM {t} WHERE sample_id BETWEEN ? AND ?", (lo, hi)
        ).fetchone()[0]
        for t in ("samples", "sample_value_rows", "segments", "io_summaries", "span_waits")
    }
    by_source = {
        t: conn.execute(f"SELECT count(*) FROM {t} WHERE source_id = ?", (source_id,)).fetchone()[0]
        for t in ("sources", "source_labels", "sessions", "off_cpu_intervals", "kernel_threads")
    }
    lanes = conn.execute(
        "SELECT count(*) FROM lanes l JOIN sessions se ON se.session_id = l.session_id "
        "WHERE se.source_id = ?",
        (source_id,),
    ).fetchone()[0]
    return {**by_sample, **by_source, "lanes": lanes}


def test_rm_deletes_a_source_with_all_its_rows_and_nothing_else(tmp_path):
    db = tmp_path / "rm.db"
    agent = loads(json.dumps(_waiting_agent_document()))  # kernel data: intervals, waits, values
    with profiling(depth=-1) as threads:
        _predict([3, 4])  # a thread, asyncio tasks, a generator's segments
    folded = tmp_path / "spy.folded"
    folded.write_text(FOLDED)
    with open_store(db) as store:
        kept_agent = store.add(agent)
        gone = store.add(threads)
        gone_stacks = store.add(folded)
        kept = store.add(_session())
        want = {kept_agent: _document(store.load(kept_agent)), kept: store.load(kept).to_tree()}
        spans = {r["source_id"]: r["spans"] for r in store.sources()}
    conn = _connect(db)
    ranges = {
        s: [r[0] for r in conn.execute("SELECT sample_id FROM samples WHERE source_id = ?", (s,))]
        for s in (gone, gone_stacks)
    }
    before = {s: _rows_of(conn, s, ids) for s, ids in ranges.items()}
    assert (
        before[gone]["samples"] == spans[gone]
        and before[gone]["segments"] > 0
        and before[gone]["lanes"] > 2
    )
    assert before[gone_stacks]["samples"] == 3  # a folded line is one sample, its count a value
    total = conn.execute("SELECT count(*) FROM samples").fetchone()[0]
    run = _mlprof("rm", db, gone, gone_stacks)
    assert run.returncode == 0 and run.stdout == (
        f"{db}: 2 sources removed with {spans[gone] + 3:,} spans or samples, 2 sources left\n"
    ), run
    for s, ids in ranges.items():
        assert set(_rows_of(conn, s, ids).values()) == {0}, (s, _rows_of(conn, s, ids))
    assert conn.execute("SELECT count(*) FROM samples").fetchone()[0] == total - spans[gone] - 3
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA foreign_keys").fetchone() == (0,)  # this test's own connection
    with open_store(db) as store:
        assert [r["source_id"] for r in store.sources()] == [kept_agent, kept]
        assert _document(store.load(kept_agent)) == want[kept_agent]
        assert store.load(kept).to_tree() == want[kept]
        assert store._conn.execute("PRAGMA foreign_keys").fetchone() == (1,)  # on again after rm
        with pytest.raises(StoreError, match="no source 99") as err:
            store.remove([kept, 99])
        assert err.value.kind == "missing" and len(store.sources()) == 2  # nothing removed
    run = _mlprof("rm", db, 99)
    assert (
        run.returncode == 2 and "no source 99" in run.stderr and "nothing was removed" in run.stderr
    )


READERS = [
    ("show", "{db}"),
    ("top", "{db}"),
    ("bubbles", "{db}"),
    ("diff", "{db}", "{db}"),
    ("trend", "{db}"),
    ("convert", "{db}", "{out}"),
    ("migrate", "{db}"),
    ("rm", "{db}", "1"),
]


@pytest.mark.parametrize("argv", READERS, ids=[a[0] for a in READERS])
@pytest.mark.parametrize("form", ["path", "url"])
def test_a_read_only_command_on_a_missing_store_creates_nothing(tmp_path, capsys, argv, form):
    name = tmp_path / "typo.db"
    db = str(name) if form == "path" else f"sqlite:///{name}"
    out = tmp_path / "out.json"
    code, stdout, stderr = _main(capsys, *[a.format(db=db, out=out) for a in argv])
    assert code == 2, (stdout, stderr)
    assert str(name) in stderr and "Traceback" not in stderr, stderr
    assert sorted(os.listdir(tmp_path)) == [], os.listdir(tmp_path)


def test_show_of_an_empty_file_refuses_it_and_leaves_it_empty(tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    run = _mlprof("show", empty)
    assert (
        run.returncode == 2
        and str(empty) in run.stderr
        and "not an mlflow-profiler store" in run.stderr
    )
    assert empty.stat().st_size == 0 and sorted(os.listdir(tmp_path)) == ["empty.db"]
    with pytest.raises(StoreError) as err:
        open_store(empty, create=False)
    assert err.value.kind == "missing"


def test_a_failed_combine_leaves_no_output_or_the_old_one_as_it_was(tmp_path):
    good = tmp_path / "good.db"
    with open_store(good) as store:
        store.add(_session())
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\x07" * 4000)  # a SQLite header, then garbage
    out = tmp_path / "out.db"
    run = _mlprof("combine", out, good, corrupt)
    assert run.returncode == 2 and str(corrupt) in run.stderr, run
    assert not any(n.startswith("out.db") for n in os.listdir(tmp_path)), os.listdir(tmp_path)
    # An existing OUT: the sources copied before the failure are taken back.
    run = _mlprof("combine", out, good)
    assert run.returncode == 0, run.stderr
    with open_store(out) as store:
        before = store.sources()
    other = tmp_path / "other.db"
    with open_store(other) as store:
        store.add(_session(4))
    run = _mlprof("combine", out, other, corrupt)
    assert run.returncode == 2, run
    with open_store(out) as store:
        assert store.sources() == before


@pytest.mark.parametrize(
    "argv,option",
    [
        (["top", "{db}", "--where", "nolabel"], "--where"),
        (["bubbles", "{db}", "--where", "nolabel"], "--where"),
        (["convert", "{db}", "{tmp}/x.pb.gz", "--where", "nolabel"], "--where"),
        (["add", "{db}", "{doc}", "--label", "nolabel"], "--label"),
        (["diff", "{db}", "{db}", "--where-a", "nolabel"], "--where-a"),
        (["diff", "{db}", "{db}", "--where-b", "nolabel"], "--where-b"),
        (["trend", "{db}", "--where", "nolabel"], "--where"),
    ],
    ids=lambda v: v if isinstance(v, str) else v[0],
)
def test_an_option_error_names_the_option_given(tmp_path, capsys, argv, option):
    db = tmp_path / "o.db"
    doc = _session().save(tmp_path / "p.json")
    with open_store(db) as store:
        store.add(doc)
    code, _, stderr = _main(capsys, *[a.format(db=db, tmp=tmp_path, doc=doc) for a in argv])
    assert code == 2, stderr
    assert f"{option} takes KEY=VALUE, got 'nolabel'" in stderr, stderr
    others = {"--where", "--where-a", "--where-b", "--label"} - {option}
    assert not any(o + " " in stderr for o in others), stderr


def test_every_output_has_the_same_mode(tmp_path):
    """The HTML pages, conversions and saved profiles: 0644 less the umask
    for a new file (as the core writes every file), a replaced file's own
    mode kept."""
    db = tmp_path / "m.db"
    with open_store(db) as store:
        store.add(_session())
    outputs = {
        "top.html": ["top", db, "--html"],
        "one.json": ["convert", db, "--source", "1"],
        "agg.pb.gz": ["convert", db],
    }
    for umask, want in ((0o022, 0o644), (0o027, 0o640)):
        for name, argv in outputs.items():
            path = tmp_path / f"{umask:o}-{name}"
            cmd = [*argv, path] if argv[0] == "top" else [argv[0], argv[1], path, *argv[2:]]
            run = subprocess.run(
                [sys.executable, "-m", "mlflow_profiler._cli", *map(str, cmd)],
                capture_output=True,
                text=True,
                timeout=120,
                preexec_fn=lambda u=umask: os.umask(u),
            )
            assert run.returncode == 0, run.stderr
            assert oct(path.stat().st_mode & 0o777) == oct(want), (name, umask)
    page = tmp_path / "22-top.html"
    os.chmod(page, 0o600)
    run = _mlprof("top", db, "--html", page)
    assert run.returncode == 0 and page.stat().st_mode & 0o777 == 0o600  # replaced: its mode kept


def test_depth_folds_sampled_stacks_into_their_ancestor(tmp_path, capsys):
    folded = tmp_path / "spy.folded"
    folded.write_text(FOLDED)  # main 2 self; main/load 10; main/predict/encode 6
    db = tmp_path / "d.db"
    with open_store(db) as store:
        store.add(folded)
    for target in (db, folded):
        for depth, want in (
            (0, {("main",): (18, 18)}),
            (1, {("main",): (2, 18), ("main", "load"): (10, 10), ("main", "predict"): (6, 6)}),
            (
                None,
                {
                    ("main",): (2, 18),
                    ("main", "load"): (10, 10),
                    ("main", "predict"): (0, 6),
                    ("main", "predict", "encode"): (6, 6),
                },
            ),
        ):
            argv = ["top", target, "--format", "json"] + (
                [] if depth is None else ["--depth", depth]
            )
            code, stdout, stderr = _main(capsys, *argv)
            assert code == 0, stderr
            rows = json.loads(stdout)["sampled"]["rows"]
            assert {
                tuple(r["path"]): (r["self_values"][0], r["total_values"][0]) for r in rows
            } == want, depth
    run = _mlprof("show", db, 1, "--depth", 1)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[2:] == [
        "   55.6%  main > load",
        "   33.3%  main > predict",
        "   11.1%  main",
    ]


def test_help_names_every_input_format_and_the_docstring_every_command():
    run = _mlprof("add", "--help")
    assert run.returncode == 0
    text = " ".join(run.stdout.split())
    for fmt in (
        "pprof",
        "py-spy",
        "speedscope",
        "Chrome trace",
        "profile document",
        "--allow-duplicate",
    ):
        assert fmt in text, fmt
    commands = _cli._parser()._subparsers._group_actions[0].choices
    assert {
        "add",
        "rm",
        "show",
        "top",
        "diff",
        "trend",
        "bubbles",
        "combine",
        "convert",
        "migrate",
    } <= set(commands)
    for name in commands:
        assert f"    mlprof {name} " in _cli.__doc__, name


def test_a_closed_pipe_ends_quietly(tmp_path):
    db = tmp_path / "pipe.db"
    with profiling(depth=-1) as session:
        _encode([3] * 20000)  # 40,000 spans: its JSON is megabytes, more than a pipe holds
    with open_store(db) as store:
        store.add(session)
    for argv in (
        ["show", db, 1],
        ["top", db, "--limit", 100000],
        ["show", db, 1, "--format", "json"],
    ):
        cmd = f"set -o pipefail; {sys.executable} -m mlflow_profiler._cli {' '.join(map(str, argv))} | head -1"
        run = subprocess.run(
            ["bash", "-c", cmd + "; echo status=${PIPESTATUS[0]}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.stderr == "", run.stderr
        lines = run.stdout.splitlines()
        assert len(lines) == 2 and lines[-1] == "status=0", (argv, lines[-3:])
    assert (
        len(session.to_json()) > 1_000_000
    )  # past any pipe buffer: the writer did meet the closed pipe
