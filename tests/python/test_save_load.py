"""save() and load(): a saved session comes back rendering and exporting
exactly as the original; bad files give a ProfileLoadError that says what is
wrong; a save that fails or is killed never leaves a broken file behind."""

from __future__ import annotations

import asyncio
import errno
import gzip
import json
import os
import pathlib
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import mlflow_profiler
from mlflow_profiler import ProfileLoadError, _core, profile_block, profile_span, profiling

FORMATS = ["json", "json_gz", "chrome_trace", "pprof", "speedscope", "folded", "html"]
EXTENSIONS = [".html", ".json", ".json.gz", ".trace.json", ".pb.gz", ".speedscope.json", ".folded"]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
root_only = pytest.mark.skipif(
    not IS_ROOT, reason="needs root to mount a small or read-only tmpfs (CI runs as root)"
)


# -- the workload: threads, asyncio tasks, a generator, labels, exceptions ------------


@profile_span("tokenize")
def tokenize(text):
    return text.split()


def batches(n):
    for i in range(n):
        yield [i] * 3


def risky(x):
    if x < 0:
        raise ValueError("negative")
    return x


def worker(n):
    return [len(tokenize("a b c")) for _ in range(n)]


async def fetch(i):
    await asyncio.sleep(0)
    return i * 2


async def gather_all():
    return await asyncio.gather(*(fetch(i) for i in range(3)))


def predict(rows):
    words = tokenize("the quick brown fox")
    total = 0
    for batch in batches(3):
        total += len(batch)
    try:
        risky(-1)
    except ValueError:
        pass
    t = threading.Thread(target=worker, args=(2,), name="Worker-1")
    t.start()
    t.join()
    fetched = asyncio.run(gather_all())
    with profile_block("post-process"):
        result = [r * total for r in rows] + fetched + [len(words)]
    return result


_SESSIONS = {}


def captured(engine):
    """One session per engine, captured once for the module."""
    if engine not in _SESSIONS:
        with profiling(depth=6, engine=engine, all_threads=True, capture_io=True) as session:
            predict(list(range(50)))
        _SESSIONS[engine] = session
    return _SESSIONS[engine]


def flags_seen(session):
    return {f for s in session.spans for f in s.flags}


# -- the comparison ---------------------------------------------------------------------


def exports(session):
    """Every format's bytes."""
    return {name: _core.export_bytes(session._built(), name) for name in FORMATS}


def assert_same(original, loaded):
    for depth in (None, 0, 1, 2, 3):
        for show_io in (True, False):
            assert loaded.format_tree(depth, show_io=show_io) == original.format_tree(
                depth, show_io=show_io
            )
        kw = dict(collapse_frameworks=True, user_modules=["asyncio"], show_c_calls=True)
        assert loaded.format_tree(depth, **kw) == original.format_tree(depth, **kw)
        assert loaded.to_json(depth) == original.to_json(depth)
        assert loaded.to_flat(depth) == original.to_flat(depth)
        assert loaded.to_tree(depth, collapse_frameworks=True) == original.to_tree(
            depth, collapse_frameworks=True
        )
    assert loaded.spans == original.spans
    assert loaded.statistics() == original.statistics()
    assert loaded.captured_depth == original.captured_depth
    want = exports(original)
    got = exports(loaded)
    for name in FORMATS:
        assert got[name] == want[name], name


def test_the_workload_has_what_the_tests_claim(engine):
    session = captured(engine)
    flags = flags_seen(session)
    assert {"exception", "labelled", "block", "generator"} <= flags, flags
    threads = session.statistics()["threads"]
    assert any(t["thread_name"] == "Worker-1" for t in threads.values()), threads
    assert any(
        t["task"] > 0 for t in threads.values()
    ), threads  # asyncio tasks have their own lanes
    assert any(s.input_summary for s in session.spans)
    assert any(s.output_summary is not None for s in session.spans)
    assert '"segments":[[' in session.to_json()


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_saved_and_loaded_session_renders_and_exports_the_same(engine, tmp_path, suffix):
    original = captured(engine)
    path = original.save(tmp_path / f"predict{suffix}")
    assert path == str(tmp_path / f"predict{suffix}")
    if suffix == ".json.gz":
        with gzip.open(path, "rb") as f:  # a real gzip reader reads it
            assert json.loads(f.read())["meta"]["format"] == "mlflow-profiler"
    loaded = mlflow_profiler.load(path)
    assert loaded.state == "finalized"
    assert_same(original, loaded)
    # and once more: a loaded session saves the same document
    again = loaded.save(tmp_path / "again.json")
    assert pathlib.Path(again).read_text() == original.to_json()


def test_save_by_format_name_and_path_types(engine, tmp_path):
    original = captured(engine)
    path = original.save(str(tmp_path / "profile.data"), format="json")
    assert mlflow_profiler.load(pathlib.Path(path)).to_json() == original.to_json()
    gz = original.save(tmp_path / "profile.gzdata", format="json_gz")
    assert pathlib.Path(gz).read_bytes()[:2] == b"\x1f\x8b"
    assert mlflow_profiler.load(gz).to_json() == original.to_json()
    loaded = mlflow_profiler._files.loads(pathlib.Path(gz).read_bytes())
    assert loaded.to_json() == original.to_json()


def test_new_file_is_readable_by_others(engine, tmp_path):
    old = os.umask(0o022)
    try:
        path = captured(engine).save(tmp_path / "p.json")
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o644


# -- bad input ---------------------------------------------------------------------------


def load_error(path) -> ProfileLoadError:
    with pytest.raises(ProfileLoadError) as info:
        mlflow_profiler.load(path)
    return info.value


def test_truncated_files(engine, tmp_path):
    original = captured(engine)
    for suffix in (".json", ".json.gz"):
        data = pathlib.Path(original.save(tmp_path / f"full{suffix}")).read_bytes()
        for cut in sorted({1, 2, 10, 100, len(data) // 3, len(data) // 2, len(data) - 1}):
            path = tmp_path / f"cut{cut}{suffix}"
            path.write_bytes(data[:cut])
            err = load_error(path)
            assert err.kind == "truncated", (suffix, cut, str(err))
            assert "truncated" in str(err) or "ends early" in str(err)
            assert str(path) in str(err) and err.path == str(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.json"
    path.write_bytes(b"")
    err = load_error(path)
    assert err.kind == "truncated"
    assert "empty" in str(err)


def test_missing_file(tmp_path):
    path = tmp_path / "nowhere.json"
    with pytest.raises(FileNotFoundError) as info:
        mlflow_profiler.load(path)
    assert info.value.errno == errno.ENOENT
    assert info.value.filename == str(path)


def test_a_directory_is_an_io_error(tmp_path):
    err = load_error(tmp_path)
    assert err.kind == "io"
    assert err.errno == errno.EISDIR
    assert isinstance(err.__cause__, IsADirectoryError)
    again = pickle.loads(pickle.dumps(err))  # e.g. across multiprocessing
    assert (again.kind, again.path, again.errno, str(again)) == (
        err.kind,
        err.path,
        err.errno,
        str(err),
    )


def test_corrupt_document_names_what_and_where(engine, tmp_path):
    doc = json.loads(captured(engine).to_json())
    doc["spans"][5][0] = 40  # a parent after the span
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    err = load_error(path)
    assert err.kind == "corrupt"
    assert "spans[5]: parent 40 is not an earlier span" in str(err)

    doc = json.loads(captured(engine).to_json())
    doc["spans"][3][6] = "soon"
    path.write_text(json.dumps(doc))
    err = load_error(path)
    assert err.kind == "corrupt"
    assert "spans[3].start_ns: expected an integer, found a string" in str(err)


def test_not_json_and_not_a_profile(engine, tmp_path):
    cases = {
        "text.json": b"this is not json",
        "binary.json": bytes(range(256)),
        "trace.json": b'{"traceEvents": []}',
        "list.json": b"[1, 2, 3]",
        "gzipped-text.json.gz": gzip.compress(b"hello"),
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        err = load_error(tmp_path / name)
        assert err.kind == "corrupt", (name, str(err))
        assert "not a profile document" in str(err), str(err)
    # A file we wrote in another format is not a document either.
    for ext in (".trace.json", ".speedscope.json", ".pb.gz", ".folded", ".html"):
        err = load_error(captured(engine).save(tmp_path / f"real{ext}"))
        assert err.kind == "corrupt", (ext, str(err))
        # each says what load() reads instead (a .pb.gz is a NUL byte, an
        # .html invalid JSON, a .trace.json JSON of another format)
        assert "reads the .json and .json.gz files that save() writes" in str(err), (ext, str(err))


def test_newer_version(engine, tmp_path):
    doc = json.loads(captured(engine).to_json())
    doc["meta"]["version"] = 99
    path = tmp_path / "future.json"
    path.write_text(json.dumps(doc))
    err = load_error(path)
    assert err.kind == "version"
    assert "version 99" in str(err) and "newer mlflow-profiler" in str(err), str(err)


def test_version_1_document_loads(engine, tmp_path):
    original = captured(engine)
    doc = json.loads(original.to_json())
    doc["meta"]["version"] = 1
    for key in ("segments", "segment_fields", "io", "io_fields"):
        del doc[key]
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(doc))
    loaded = mlflow_profiler.load(path)
    assert loaded.format_tree(show_io=False) == original.format_tree(show_io=False)
    assert [s.label for s in loaded.spans] == [s.label for s in original.spans]
    assert all(s.input_summary is None for s in loaded.spans)  # version 1 had no I/O


def test_random_damage_loads_or_fails_cleanly(engine, tmp_path):
    rng = random.Random(5)
    for suffix in (".json", ".json.gz"):
        data = bytearray(pathlib.Path(captured(engine).save(tmp_path / f"p{suffix}")).read_bytes())
        for i in range(150):
            bad = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                bad[rng.randrange(len(bad))] = rng.randrange(256)
            path = tmp_path / f"bad{i}{suffix}"
            path.write_bytes(bytes(bad))
            try:
                session = mlflow_profiler.load(path)
            except ProfileLoadError as err:
                assert err.kind in ("truncated", "corrupt", "version"), str(err)
            else:  # a flip that left a valid document: it must be usable
                session.format_tree()
                session.to_flat()
                len(session.spans)
            path.unlink()


def test_unknown_extension_lists_the_known_ones(engine, tmp_path):
    with pytest.raises(ValueError) as info:
        captured(engine).save(tmp_path / "predict.txt")
    message = str(info.value)
    for ext in EXTENSIONS:
        assert ext in message
    assert "format=" in message
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match="unknown format 'yaml'"):
        captured(engine).save(tmp_path / "predict.json", format="yaml")


# -- atomicity with real faults -------------------------------------------------------------


def big_session(engine, calls=20_000):
    def leaf(i):
        return i

    def middle(i):
        return leaf(i) + leaf(i + 1)

    with profiling(depth=-1, engine=engine) as session:
        for i in range(calls):
            middle(i)
    return session


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs mounted for the test, unmounted after it."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount_point)], check=True
    )
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


@root_only
def test_full_disk_keeps_the_previous_file(engine, small_tmpfs):
    small = captured(engine)
    path = small_tmpfs / "predict.json"
    small.save(path, format="json_gz")
    before = path.read_bytes()
    big = big_session(engine)
    assert len(big.to_json()) > 200_000  # far more than the 64 KiB filesystem
    with pytest.raises(OSError) as info:
        big.save(path)
    assert info.value.errno == errno.ENOSPC
    assert info.value.filename == str(path)
    assert path.read_bytes() == before
    assert mlflow_profiler.load(path).to_json() == small.to_json()
    assert os.listdir(small_tmpfs) == ["predict.json"]  # no temporary file left


def test_read_only_directory(engine, tmp_path):
    """Root ignores directory permissions, so as root the directory is a
    read-only mount; otherwise it is a directory without write permission."""
    original = captured(engine)
    target = tmp_path / "ro"
    target.mkdir()
    path = target / "predict.json"
    if IS_ROOT:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target)], check=True)
    try:
        original.save(path)
        before = path.read_bytes()
        if IS_ROOT:
            subprocess.run(["mount", "-o", "remount,ro", str(target)], check=True)
        else:
            target.chmod(0o555)
        with pytest.raises(OSError) as info:
            big_session(engine, 100).save(path)
        assert info.value.errno == (errno.EROFS if IS_ROOT else errno.EACCES)
        assert info.value.filename == str(path)
        assert path.read_bytes() == before
        assert os.listdir(target) == ["predict.json"]
    finally:
        if IS_ROOT:
            subprocess.run(["umount", str(target)], check=True)
        else:
            target.chmod(0o755)


_SAVER = textwrap.dedent(
    """
    import sys
    from mlflow_profiler import profiling

    def leaf(i):
        return i

    def middle(i):
        return leaf(i) + leaf(i + 1)

    with profiling(depth=-1, engine=sys.argv[2]) as session:
        for i in range(int(sys.argv[3])):
            middle(i)
    print(session._built().span_count, flush=True)
    while True:
        session.save(sys.argv[1])
        print("saved", flush=True)
    """
)


def test_killed_while_saving_never_leaves_a_broken_file(engine, tmp_path):
    """A process that saves a big profile in a loop is killed with SIGKILL:
    at random moments, and the moment its temporary file appears (mid-write).
    The file at the path is always a whole profile."""
    rng = random.Random(11)
    script = tmp_path / "saver.py"
    script.write_text(_SAVER)
    interrupted = 0
    for attempt in range(8):
        path = tmp_path / f"attempt{attempt}" / "predict.json"
        path.parent.mkdir()
        with subprocess.Popen(
            [sys.executable, str(script), str(path), engine, "20000"],
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        ) as proc:
            try:
                spans = int(proc.stdout.readline())
                assert proc.stdout.readline() == "saved\n"  # one whole save before the kill
                if attempt % 2 == 0:
                    time.sleep(rng.uniform(0.0, 0.3))
                else:
                    # Writing and fsync take a few ms of each save: wait for them.
                    deadline = time.monotonic() + 10
                    while len(os.listdir(path.parent)) < 2 and time.monotonic() < deadline:
                        pass
                proc.send_signal(signal.SIGKILL)
            finally:
                proc.kill()
                proc.wait()
        leftovers = [n for n in os.listdir(path.parent) if n != "predict.json"]
        interrupted += bool(leftovers)  # killed between creating the temporary file and the rename
        assert all(n.startswith(".predict.json.tmp-") for n in leftovers), leftovers
        assert mlflow_profiler.load(path).statistics()["span_count"] == spans
    # At least one kill landed inside a write, or the test did not test that.
    assert interrupted >= 1
