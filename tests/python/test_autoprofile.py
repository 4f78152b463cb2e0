"""autoprofile() on real MLflow models logged to a real tracking store and
loaded back with mlflow.pyfunc.load_model."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import textwrap
import threading

import pytest
from _helpers import require_mlflow, require_tool, walk

mlflow = require_mlflow()

import mlflow_profiler  # noqa: E402
from mlflow_profiler import _autoprofile  # noqa: E402

pytestmark = [
    # MLflow's own advice when a PythonModel.predict has no type hints, and
    # its notices about the models it logs: not about the profiler.
    pytest.mark.filterwarnings("ignore:.*type hint:UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning:mlflow"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(churn model, sklearn model, sklearn sample), logged once per module."""
    import _mlflow_models
    import mlflow.pyfunc

    store, churn_uri, sk_uri, X = _mlflow_models.log_models_in_new_store(
        tmp_path_factory.mktemp("store")
    )
    with _mlflow_models.tracking_uri(store):
        return mlflow.pyfunc.load_model(churn_uri), mlflow.pyfunc.load_model(sk_uri), X


@pytest.fixture(autouse=True)
def _autoprofile_off():
    """Every test starts and ends with autoprofile off and MLflow unpatched."""
    from mlflow.pyfunc import PyFuncModel

    original = PyFuncModel.__dict__["predict"]
    yield
    mlflow_profiler.autoprofile(disable=True)
    assert PyFuncModel.__dict__["predict"] is original
    _autoprofile._last.set(None)


def labels_at(session, depth):
    return [n["label"] for n in walk(session.to_tree()) if n["depth"] == depth]


def test_patch_is_idempotent_and_restores_the_exact_original(models):
    from mlflow.pyfunc import PyFuncModel

    original = PyFuncModel.__dict__["predict"]
    original_stream = PyFuncModel.__dict__.get("predict_stream")
    mlflow_profiler.autoprofile(depth=1)
    wrapper = PyFuncModel.__dict__["predict"]
    assert wrapper is not original and wrapper.__wrapped__ is original
    mlflow_profiler.autoprofile(depth=3, sample_rate=0.5)  # new settings, same single wrapper
    assert PyFuncModel.__dict__["predict"] is wrapper
    assert _autoprofile._config.depth == 3
    mlflow_profiler.autoprofile(disable=True)
    assert PyFuncModel.__dict__["predict"] is original
    assert PyFuncModel.__dict__.get("predict_stream") is original_stream
    mlflow_profiler.autoprofile(disable=True)  # disabling twice is fine
    assert PyFuncModel.__dict__["predict"] is original


def test_python_model_profile_shows_the_users_functions(models):
    churn, _, _ = models
    import _mlflow_models

    df = _mlflow_models.frame(64)
    expected = churn.predict(df)
    mlflow_profiler.autoprofile(depth=2, capture_io=True)
    got = churn.predict(df)
    assert got.equals(expected)
    session = mlflow_profiler.last_profile()
    assert session is not None and session.state == "finalized"
    roots = session.to_tree()
    assert [r["label"] for r in roots] == ["predict [pyfunc ChurnModel]"]
    depth1 = labels_at(session, 1)
    # The user's predict is the root itself: what it calls is depth 1.
    for name in ("ChurnModel._clean", "ChurnModel._features", "ChurnModel._score"):
        assert name in depth1, depth1
    assert "ChurnModel.predict" not in [n["label"] for n in walk(roots)]
    assert "_PythonModelPyfuncWrapper.predict" not in [n["label"] for n in walk(roots)]
    # The root's I/O is the model's: the input frame and the output frame.
    root = session.spans[0]
    assert root.input_summary["data"].shape == (64, 2)
    assert root.output_summary.shape == (64, 1)
    meta = session._built().meta
    assert meta["model.class"] == "ChurnModel" and meta["model.flavor"] == "pyfunc"
    assert meta["model.uri"].startswith(("models:/", "runs:/"))
    # Depth 2: what the user's helpers call (pandas, numpy), under them.
    features = next(n for n in walk(roots) if n["label"] == "ChurnModel._features")
    assert features["children"], "the helpers' own calls are recorded at depth 2"
    assert max(n["depth"] for n in walk(roots)) == 2


def test_sklearn_pipeline_profile(models):
    _, sk, X = models
    expected = sk.predict(X)
    mlflow_profiler.autoprofile(depth=3)
    got = sk.predict(X)
    assert (got == expected).all()
    session = mlflow_profiler.last_profile()
    assert session.to_tree()[0]["label"] == "predict [sklearn Pipeline]"
    assert "Pipeline.predict" in labels_at(session, 1)
    pipeline = next(n for n in walk(session.to_tree()) if n["label"] == "Pipeline.predict")
    below = [n["label"] for n in walk(pipeline["children"])]
    assert any(
        label.endswith("StandardScaler.transform") or label == "StandardScaler.transform"
        for label in below
    ) or any("transform" in label for label in below), below
    assert any("LogisticRegression" in label or "predict" in label for label in below), below


def test_sample_rate_zero_records_nothing_and_one_records_every_call(models):
    churn, _, _ = models
    import _mlflow_models

    df = _mlflow_models.frame(8)
    mlflow_profiler.autoprofile(sample_rate=0.0)
    before = _autoprofile._sampled
    for _ in range(20):
        churn.predict(df)
    assert _autoprofile._sampled == before
    assert mlflow_profiler.last_profile() is None
    mlflow_profiler.autoprofile(sample_rate=1.0, depth=0)
    seen = []
    for _ in range(10):
        churn.predict(df)
        seen.append(mlflow_profiler.last_profile())
    assert _autoprofile._sampled == before + 10 and len({id(s) for s in seen}) == 10


def test_each_call_follows_the_configuration_and_a_dropped_model_is_freed(tmp_path):
    """What a model's sessions start from is prepared once per model and
    configuration: a new autoprofile() applies from the next call, two
    models keep their own names, and the profiler holds no model alive."""
    import gc
    import weakref

    import _mlflow_models
    import mlflow.pyfunc

    store, churn_uri, sk_uri, X = _mlflow_models.log_models_in_new_store(tmp_path)
    with _mlflow_models.tracking_uri(store):
        churn = mlflow.pyfunc.load_model(churn_uri)
        pipeline = mlflow.pyfunc.load_model(sk_uri)
    df = _mlflow_models.frame(8)
    mlflow_profiler.autoprofile(depth=0)
    churn.predict(df)
    shallow = mlflow_profiler.last_profile()
    mlflow_profiler.autoprofile(depth=1)
    churn.predict(df)
    deep = mlflow_profiler.last_profile()
    assert shallow.depth == 0 and labels_at(shallow, 1) == []
    assert deep.depth == 1 and "ChurnModel._features" in labels_at(deep, 1)
    pipeline.predict(X)
    assert "sklearn" in labels_at(mlflow_profiler.last_profile(), 0)[0]
    churn.predict(df)
    assert "ChurnModel" in labels_at(mlflow_profiler.last_profile(), 0)[0]
    mlflow_profiler.autoprofile(disable=True)
    _autoprofile._last.set(None)
    refs = [weakref.ref(churn), weakref.ref(pipeline)]
    del churn, pipeline, shallow, deep
    gc.collect()
    assert [r() for r in refs] == [None, None]


def test_sample_rate_is_random_per_call(models):
    churn, _, _ = models
    import _mlflow_models

    df = _mlflow_models.frame(4)
    mlflow_profiler.autoprofile(sample_rate=0.25, depth=0)
    before = _autoprofile._sampled
    n = 400
    for _ in range(n):
        churn.predict(df)
    k = _autoprofile._sampled - before
    sd = math.sqrt(n * 0.25 * 0.75)
    assert abs(k - n * 0.25) < 5 * sd, k  # 5 sigma: fails about once in 1.7 million runs


@pytest.mark.parametrize("rate", [1.5, -0.1, float("nan")])
def test_sample_rate_outside_0_1_is_a_value_error(models, rate):
    with pytest.raises(ValueError, match="sample_rate must be in"):
        mlflow_profiler.autoprofile(sample_rate=rate)
    with pytest.raises(TypeError, match="sample_rate must be a number"):
        mlflow_profiler.autoprofile(sample_rate="0.5")
    assert not _autoprofile.is_enabled()


def test_concurrent_predicts_each_get_their_own_profile(models):
    churn, _, _ = models
    import _mlflow_models

    mlflow_profiler.autoprofile(depth=2, capture_io=True)
    errors = []
    results = {}

    def worker(i):
        try:
            rows = 10 + i
            df = _mlflow_models.frame(rows, seed=i)
            for _ in range(15):
                out = churn.predict(df)
                assert len(out) == rows
                session = mlflow_profiler.last_profile()
                # The last profile of this thread is this thread's own call.
                assert session.spans[0].input_summary["data"].shape == (rows, 2)
                assert "ChurnModel._score" in labels_at(session, 1)
            results[i] = session
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len({id(s) for s in results.values()}) == 8
    assert mlflow_profiler.last_profile() is None  # this thread made no call


def test_predict_stream_records_the_stream_not_the_consumer(models):
    churn, _, _ = models
    from mlflow.pyfunc import PyFuncModel

    if "predict_stream" not in PyFuncModel.__dict__:
        pytest.skip(f"MLflow {mlflow.__version__} has no PyFuncModel.predict_stream")
    if churn._predict_stream_fn is None:
        pytest.skip("this MLflow does not load predict_stream for a PythonModel")
    expected = list(churn.predict_stream({"spend": 10.0, "visits": 2.0}))
    mlflow_profiler.autoprofile(depth=1)
    chunks = []

    def consumer_work(chunk):
        return chunk["chunk"].upper()

    for chunk in churn.predict_stream({"spend": 10.0, "visits": 2.0}):
        chunks.append(chunk)
        consumer_work(chunk)
    assert chunks == expected
    session = mlflow_profiler.last_profile()
    assert session.state == "finalized"
    roots = session.to_tree()
    assert [r["label"] for r in roots] == ["predict_stream [pyfunc ChurnModel]"]
    all_labels = [n["label"] for n in walk(roots)]
    assert all_labels.count("ChurnModel._stream_piece") == 3
    assert "consumer_work" not in " ".join(all_labels)


def test_an_unread_stream_ends_its_session(models):
    churn, _, _ = models
    from mlflow.pyfunc import PyFuncModel

    if "predict_stream" not in PyFuncModel.__dict__ or churn._predict_stream_fn is None:
        pytest.skip("no predict_stream in this MLflow")
    from mlflow_profiler import _core

    mlflow_profiler.autoprofile(depth=1)
    stream = churn.predict_stream({"spend": 10.0, "visits": 2.0})
    next(stream)
    assert _core._native_collecting() == 1
    del stream
    assert _core._native_collecting() == 0
    assert mlflow_profiler.last_profile() is not None


def test_a_failing_predict_raises_as_before_and_is_profiled(models):
    churn, _, _ = models
    import pandas as pd

    bad = pd.DataFrame({"nope": ["x"]})
    with pytest.raises(Exception) as unprofiled:
        churn.predict(bad)
    mlflow_profiler.autoprofile(depth=1)
    with pytest.raises(type(unprofiled.value)):
        churn.predict(bad)
    session = mlflow_profiler.last_profile()
    assert "exception" in session.to_tree()[0]["flags"]


def test_collector_gets_every_sampled_profile(models):
    churn, _, _ = models
    import _mlflow_models

    collector = mlflow_profiler.ProfileCollector()
    mlflow_profiler.autoprofile(depth=1, collector=collector)
    for _ in range(5):
        churn.predict(_mlflow_models.frame(16))
    summary = collector.summary()
    root = summary["predict [pyfunc ChurnModel]"]
    assert root["count"] == 5
    assert summary["predict [pyfunc ChurnModel]/ChurnModel._score"]["count"] == 5


def test_profiler_failure_never_reaches_the_model(models, caplog):
    # A fault we cannot cause for real: the session cannot be built. The
    # call must run unprofiled and the failure be logged once.
    churn, _, _ = models
    import _mlflow_models

    df = _mlflow_models.frame(8)
    expected = churn.predict(df)
    mlflow_profiler.autoprofile(depth=1)
    real = _autoprofile._model_info
    _autoprofile._model_info = lambda *a, **k: 1 / 0
    try:
        with caplog.at_level(logging.WARNING, logger="mlflow_profiler"):
            assert churn.predict(df).equals(expected)
            assert churn.predict(df).equals(expected)
    finally:
        _autoprofile._model_info = real
    assert mlflow_profiler.last_profile() is None
    messages = [
        r.getMessage() for r in caplog.records if "could not start a session" in r.getMessage()
    ]
    assert len(messages) <= 1  # once per kind per process (may have been logged by an earlier test)


def test_without_mlflow_autoprofile_names_the_extra():
    code = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "mlflow" or name.startswith("mlflow."):
                    raise ImportError("No module named " + repr(name))
        sys.meta_path.insert(0, Block())
        import mlflow_profiler
        assert "mlflow" not in sys.modules
        try:
            mlflow_profiler.autoprofile()
        except ImportError as e:
            print("ERR", e)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ)
    )
    assert out.returncode == 0, out.stderr
    assert "pip install 'mlflow-profiler[mlflow]'" in out.stdout


# -- output_dir: the extension's writer thread ---------------------------------


def export_stats():
    return {k: v for k, v in mlflow_profiler.statistics()["export"].items() if k != "run_id"}


def test_output_dir_profiles_are_written_by_the_writer_thread(models, tmp_path):
    churn, _, _ = models
    import _mlflow_models

    df = _mlflow_models.frame(16)
    before = export_stats()
    out = tmp_path / "new" / "profiles"  # created by the writer
    mlflow_profiler.autoprofile(depth=2, sample_rate=1.0, output_dir=str(out))
    results = [churn.predict(df) for _ in range(5)]
    assert mlflow_profiler.flush(60)
    after = export_stats()
    files = sorted(out.glob("profile-*.json.gz"))
    assert len(files) == 5
    assert all(r.equals(results[0]) for r in results)
    loaded = mlflow_profiler.load(files[-1])
    assert loaded.spans[0].label == "predict [pyfunc ChurnModel]"
    assert (
        loaded.statistics()["span_count"]
        == mlflow_profiler.last_profile().statistics()["span_count"]
    )
    assert after["submitted"] - before["submitted"] == 5
    assert after["exported"] - before["exported"] == 5
    assert after["queued"] == 0
    # the writer runs below the request threads: SCHED_IDLE (any waking
    # request thread preempts it), nice 19, its own name
    writers = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as f:
            stat = f.read()
        if stat[stat.index("(") + 1 : stat.rindex(")")] == "mlprof-writer":
            writers.append(int(tid))
    assert len(writers) == 1
    assert os.sched_getscheduler(writers[0]) == os.SCHED_IDLE
    assert os.getpriority(os.PRIO_PROCESS, writers[0]) == 19
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the caller's own policy is untouched


def test_output_dir_full_queue_drops_and_counts(tmp_path):
    from mlflow_profiler import _core

    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    with mlflow_profiler.profiling(depth=-1) as session:
        fib(17)  # 5167 spans: each write takes milliseconds
    profile = session._built()
    before = export_stats()
    accepted = [
        _core.write_in_background(profile, str(tmp_path / f"p{i}.json.gz"), 1) for i in range(20)
    ]
    assert mlflow_profiler.flush(60)
    after = export_stats()
    assert accepted[0] and accepted.count(False) >= 10  # one slot: the rest of the burst is dropped
    assert after["dropped"] - before["dropped"] == accepted.count(False)
    assert after["exported"] - before["exported"] == accepted.count(True)
    assert after["submitted"] - before["submitted"] == 20
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        f"p{i}.json.gz" for i, ok in enumerate(accepted) if ok
    )


def _under_strace(strace, syscalls, script, out_dir, tmp_path):
    """Runs `script` (argv[1]: out_dir) in a child under strace -f tracing
    `syscalls`; asserts it succeeded and returns (the process, the trace's path)."""
    log = tmp_path / "strace.log"
    proc = subprocess.run(
        [
            strace,
            "-f",
            "-qq",
            "-e",
            f"trace={syscalls}",
            "-o",
            str(log),
            sys.executable,
            "-c",
            script,
            str(out_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc, log


def test_output_dir_writes_without_a_flush_per_profile_and_flush_makes_them_durable(tmp_path):
    """What the kernel is asked, seen by strace: the writer thread issues no
    fsync per profile (each costs a journal commit: bench/RESULTS.md), and
    flush() makes all of them durable with one syncfs."""
    import shutil

    strace = require_tool(shutil.which("strace"), "strace", "apt-get install strace")
    script = textwrap.dedent("""
        import sys, time, mlflow_profiler
        from mlflow_profiler import _core

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        with mlflow_profiler.profiling(depth=-1) as session:
            fib(12)
        profile = session._built()
        for i in range(20):
            assert _core.write_in_background(profile, sys.argv[1] + "/p%d.json.gz" % i, 64)
            if i == 9:  # let the first ten be written before the rest are queued
                while _core.background_writer_stats()["queued"]:
                    time.sleep(0.001)
        assert _core.flush_background_writes(60)
        print(_core.background_writer_stats()["written"])
    """)
    out_dir = tmp_path / "profiles"
    proc, log = _under_strace(strace, "fsync,fdatasync,syncfs,sync", script, out_dir, tmp_path)
    assert proc.stdout.split() == ["20"]
    calls = [
        line.split(None, 1)[1].split("(", 1)[0]
        for line in log.read_text().splitlines()
        if "(" in line and not line.split(None, 1)[1].startswith("+++")
    ]
    assert calls == ["syncfs"], calls
    for i in range(20):  # whole: fib(12) is 465 calls
        loaded = mlflow_profiler.load(str(out_dir / f"p{i}.json.gz"))
        assert sum(1 for s in loaded.spans if s.function == "fib") == 465
    assert not [p for p in out_dir.iterdir() if p.name.startswith(".")]  # no temporaries left


def test_queueing_a_profile_does_not_wake_the_writer_while_it_polls(tmp_path):
    """A request thread hands a profile over without a futex wake-up while
    the writer is active (it polls): a wake-up is a syscall plus an
    interrupt to another CPU, ~20 us of the request (bench/RESULTS.md).
    strace shows the submitting thread's futex calls; a flush still wakes
    the writer, and every profile is written."""
    import shutil

    strace = require_tool(shutil.which("strace"), "strace", "apt-get install strace")
    script = textwrap.dedent("""
        import os, sys, time, mlflow_profiler
        from mlflow_profiler import _core

        with mlflow_profiler.profiling(depth=-1) as session:
            sum(range(10))
        profile = session._built()
        assert _core.write_in_background(profile, sys.argv[1] + "/first.json", 64)
        assert _core.flush_background_writes(60)  # the writer is now active: it polls
        os.getppid()  # a marker in the trace
        for i in range(10):  # requests: the writer has written each before the next
            assert _core.write_in_background(profile, sys.argv[1] + "/p%d.json" % i, 64)
            time.sleep(0.005)
        os.getppid()
        assert _core.flush_background_writes(60)
        print(os.getpid(), _core.background_writer_stats()["written"])
    """)
    out_dir = tmp_path / "profiles"
    proc, log = _under_strace(strace, "futex,getppid", script, out_dir, tmp_path)
    main, written = proc.stdout.split()
    assert written == "11"
    lines = [line for line in log.read_text().splitlines() if line.split(None, 1)[0] == main]
    markers = [i for i, line in enumerate(lines) if "getppid(" in line]
    assert len(markers) == 2, lines
    wakes = [line for line in lines[markers[0] : markers[1]] if "FUTEX_WAKE" in line]
    # The old writer was woken per profile (10 here). A wake-up can still come
    # from the writer's mutex if its poll takes it at that instant.
    assert len(wakes) <= 1, wakes
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        ["first.json"] + [f"p{i}.json" for i in range(10)]
    )


def test_output_dir_write_failure_is_counted_and_logged_once(models, tmp_path, caplog):
    churn, _, _ = models
    import _mlflow_models

    from mlflow_profiler import _log

    df = _mlflow_models.frame(16)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    before = export_stats()
    _log._seen.discard("export-failed")
    mlflow_profiler.autoprofile(depth=2, sample_rate=1.0, output_dir=str(blocker / "profiles"))
    with caplog.at_level(logging.WARNING, logger="mlflow_profiler"):
        expected = churn.predict(df)
        for _ in range(3):
            assert churn.predict(df).equals(expected)  # the model keeps serving
        mlflow_profiler.flush(60)
        churn.predict(df)  # a later submit reports too; still once
        mlflow_profiler.flush(60)
    after = export_stats()
    assert after["failed"] - before["failed"] == 5
    failures = [r for r in caplog.records if "exporting a profile failed" in r.getMessage()]
    assert len(failures) == 1 and "Not a directory" in failures[0].getMessage()


def test_output_dir_writer_works_in_a_forked_child(models, tmp_path):
    churn, _, _ = models
    import _mlflow_models

    df = _mlflow_models.frame(16)
    mlflow_profiler.autoprofile(depth=2, sample_rate=1.0, output_dir=str(tmp_path / "parent"))
    churn.predict(df)  # the parent's writer thread exists now
    assert mlflow_profiler.flush(60)
    mlflow_profiler.autoprofile(depth=2, sample_rate=1.0, output_dir=str(tmp_path / "child"))
    pid = os.fork()
    if pid == 0:  # the child: its own writer thread
        code = 1
        try:
            churn.predict(df)
            code = 0 if mlflow_profiler.flush(30) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    (written,) = (tmp_path / "child").glob("profile-*.json.gz")
    assert f"-{pid}-" in written.name  # the child's pid, not the parent's remembered one


def test_profile_names_stay_unique_across_request_threads():
    from mlflow_profiler import _delivery

    names = []

    def take():
        names.extend(_delivery._profile_name() for _ in range(2000))

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(names)) == len(names) == 16000
    stamp, pid, seq = names[0].split("-")[1:]
    assert pid == str(os.getpid()) and len(stamp) == 15 and stamp[8] == "T" and len(seq) >= 6
