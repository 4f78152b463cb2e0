"""The profile store (docs/store.md): profiles that accumulate, with their
provenance, in SQLite (one file, no server: the default) or PostgreSQL (a
team's or a fleet's, several writers).

    from mlflow_profiler.store import open_store

    with open_store("profiles.db") as store:
        source_id = store.add(session, labels={"model": "fraud", "version": "3"})
        again = store.load(source_id)      # the same tree

The schema, the rows a profile becomes and the reading back live in the
core (userspace/core/store.*); this module owns the connection and the
transactions: one add is one transaction, so a writer killed midway leaves
the store as it was. SQLite runs in WAL mode with a busy timeout, so several
processes can add to one file at once.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import sqlite3
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core
from ._log import log_once

__all__ = [
    "DuplicateSource",
    "LABEL_PREFIX",
    "Store",
    "StoreError",
    "add_quietly",
    "migrate",
    "open_store",
]

_BUSY_TIMEOUT_MS = 30_000

# source_labels keeps the labels a source was added with as "label.KEY",
# beside its meta's keys (so a label named like a meta key never shadows
# it). Defined once, in the core (store/store.h kLabelPrefix).
LABEL_PREFIX: str = _core.STORE_LABEL_PREFIX


class StoreError(Exception):
    """A store could not be opened, read or written. ``kind`` says why:
    'version' (written by a newer mlflow-profiler, or older than this one:
    `mlprof migrate`), 'corrupt' (not a store), 'missing' (no such source,
    or no store where one must exist), 'unreachable' (a server that does not
    answer), 'duplicate' (DuplicateSource), 'io'."""

    def __init__(self, message: str, kind: str = "io", target: Optional[str] = None) -> None:
        super().__init__(message if target is None else f"{target}: {message}")
        self.kind = kind
        self.target = target


class DuplicateSource(StoreError):
    """Store.add of a file whose content (its sha256) a source of the store
    already has: nothing was added. ``source_id`` is that source;
    ``allow_duplicate=True`` adds it again."""

    def __init__(self, target: str, path: str, source_id: int) -> None:
        super().__init__(
            f"{path}: already in the store as source {source_id} (the same content); not added",
            kind="duplicate",
            target=None,
        )
        self.store = target
        self.path = path
        self.source_id = source_id


def _one_line(exc: BaseException) -> str:
    """An error's text on one line (SQLite quotes a damaged schema's lines)."""
    return " ".join(str(exc).split())


# What SQLite raises past a store's opening on a damaged file.
_SQLITE_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)


def _sqlite_failure(exc: Exception, target: Optional[str]) -> StoreError:
    """The StoreError for what SQLite raised past the store's opening: a
    damaged file (a page, the schema, a text value that is not UTF-8) is
    'corrupt', a lock held past the busy timeout 'io'. Every command then
    says it in one line, and the API raises one exception type."""
    if isinstance(exc, UnicodeDecodeError):
        return StoreError(
            f"not a readable SQLite store: a text value is not UTF-8 ({exc.reason} at byte {exc.start})",
            kind="corrupt",
            target=target,
        )
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return StoreError(f"the SQLite store is busy: {exc}", kind="io", target=target)
    return StoreError(
        f"not a readable SQLite store: {_one_line(exc)}", kind="corrupt", target=target
    )


class _SqliteDriver:
    """What the core's StoreDriver calls (pyext/bind_store.cpp). SQLite's
    errors leave it as StoreError (_sqlite_failure)."""

    dialect = "sqlite"
    begin = "BEGIN IMMEDIATE"  # the write lock at once: no deadlock upgrading a read lock

    def __init__(self, conn: sqlite3.Connection, target: Optional[str] = None) -> None:
        self.conn = conn
        self.target = target

    def execute(self, sql: str, params: tuple) -> None:
        try:
            self.conn.execute(sql, params)
        except _SQLITE_ERRORS as exc:
            raise _sqlite_failure(exc, self.target) from None

    def executemany(self, sql: str, rows: list) -> None:
        try:
            self.conn.executemany(sql, rows)
        except _SQLITE_ERRORS as exc:
            raise _sqlite_failure(exc, self.target) from None

    def query(self, sql: str, params: tuple) -> List[tuple]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except _SQLITE_ERRORS as exc:
            raise _sqlite_failure(exc, self.target) from None


class _PostgresDriver:
    """The same calls on a psycopg 3 connection (autocommit; the store opens
    its transactions). The core writes `?` placeholders; psycopg takes `%s`."""

    dialect = "postgres"
    begin = "BEGIN"

    def __init__(self, conn) -> None:
        self.conn = conn
        self._sql: Dict[str, str] = {}
        self._copy: Dict[str, str] = {}

    def _text(self, sql: str) -> str:
        text = self._sql.get(sql)
        if text is None:
            text = self._sql[sql] = sql.replace("%", "%%").replace("?", "%s")
        return text

    def execute(self, sql: str, params: tuple) -> None:
        self.conn.execute(self._text(sql), params)

    def executemany(self, sql: str, rows: list) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(self._text(sql), rows)

    def copy_text(self, sql: str, text: bytes) -> bool:
        """Runs a plain INSERT's rows, given as COPY text (the core makes it:
        pyext/py_driver.h), as one COPY; False for another statement. A plain
        INSERT of many rows goes as COPY: one stream, not a statement a row
        (9x the rate for 200k spans); ON CONFLICT inserts stay statements.
        The core says which is which (store/store_copy.h)."""
        statement = self._copy.get(sql)
        if statement is None:
            statement = self._copy[sql] = _core.store_copy_statement(sql)
        if not statement:
            return False
        with self.conn.cursor() as cur, cur.copy(statement) as copy:
            copy.write(text)
        return True

    def query(self, sql: str, params: tuple) -> List[tuple]:
        return self.conn.execute(self._text(sql), params).fetchall()


def _trace_hex(trace_id: str) -> str:
    """A trace id as session_traces keeps it: MLflow 3's ``tr-<hex>`` is its
    OpenTelemetry trace id in hex."""
    return trace_id[3:] if trace_id.startswith("tr-") else trace_id.lower()


def _sqlite_path(target: str) -> str:
    if target.startswith("sqlite:///"):
        return (
            target[len("sqlite:///") - 1 :]
            if target.startswith("sqlite:////")
            else target[len("sqlite:///") :]
        )
    return target


class Store:
    """An open store. Use `open_store()`; close it (or use it as a context
    manager) when done."""

    def __init__(self, target: str, conn, driver) -> None:
        self.target = target
        self._conn = conn
        self._driver = driver
        self._batched = False

    # -- writing -------------------------------------------------------------

    def add(
        self,
        profile,
        *,
        source_type: Optional[str] = None,
        uri: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        allow_duplicate: bool = False,
        content_hash: Optional[str] = None,
    ) -> int:
        """Adds a profile: a ProfileSession (from profiling(), last_profile()
        or load()), sampled stacks (load_stacks()), or the path of a profile
        document or of another tool's file. Returns its source id.
        ``labels`` (model, version, run_id, ...) are kept with its provenance
        and can be filtered on (`mlprof top --where model=fraud`).

        A file's content hash (sha256 of its bytes) is kept with the source:
        a file whose content the store already has raises DuplicateSource and
        adds nothing, unless ``allow_duplicate``. ``content_hash`` gives the
        hash of a profile that is not a path (mlprof combine copies it)."""
        from ._files import load
        from ._session import ProfileSession

        clean = {str(k): str(v) for k, v in (labels or {}).items()}
        if isinstance(profile, (str, os.PathLike)):
            path = os.fspath(profile)
            uri = uri if uri is not None else str(Path(profile).resolve())
            with open(profile, "rb") as f:
                data = f.read()
            content_hash = hashlib.sha256(data).hexdigest()
            self._check_duplicate(
                content_hash, path, allow_duplicate
            )  # before the work of reading it
            if _core.detect_input(data) == "document":
                profile = load(profile)
            else:  # another tool's: Chrome trace, speedscope, pprof, folded stacks
                imported = _core.import_profile(data)
                if isinstance(imported, tuple):
                    from ._files import ProfileLoadError

                    raise ProfileLoadError(
                        f"cannot import {os.fspath(profile)!r}: {imported[1]}",
                        kind=imported[0],
                        path=os.fspath(profile),
                    )
                if isinstance(imported, _core.StackSamples):
                    with self._adding(content_hash, path, allow_duplicate) as hashed:
                        return _core.store_add_samples(
                            self._driver,
                            self._driver.dialect,
                            imported,
                            source_type or imported.meta.get("source", "pprof"),
                            uri,
                            clean,
                            time.time_ns(),
                            content_hash=hashed,
                        )
                profile = ProfileSession._from_profile(imported)
                source_type = source_type or imported.meta.get("source")
        else:
            path = uri or "the profile"
        if isinstance(
            profile, _core.StackSamples
        ):  # another store's sampled stacks (mlprof combine)
            with self._adding(content_hash, path, allow_duplicate) as hashed:
                return _core.store_add_samples(
                    self._driver,
                    self._driver.dialect,
                    profile,
                    source_type or profile.meta.get("source", "pprof"),
                    uri or "",
                    clean,
                    time.time_ns(),
                    content_hash=hashed,
                )
        if not isinstance(profile, ProfileSession):
            raise TypeError(
                f"Store.add takes a ProfileSession, StackSamples or a path, not {type(profile).__name__}"
            )
        built = profile._built()
        if source_type is None:
            source_type = "ebpf" if built.meta.get("source") == "ebpf" else "in-process"
        with self._adding(content_hash, path, allow_duplicate) as hashed:
            return _core.store_add(
                self._driver,
                self._driver.dialect,
                built,
                source_type,
                uri or "",
                clean,
                time.time_ns(),
                content_hash=hashed,
            )

    def remove(self, source_ids: Sequence[int]) -> int:
        """Deletes the sources and every row of theirs (sessions, spans or
        samples, values, I/O, kernel data, labels) in one transaction
        (`mlprof rm`); returns the number of spans and samples deleted. The
        functions and call paths they shared with others stay. StoreError
        (kind 'missing') naming ids the store does not have: nothing is
        deleted then."""
        ids = sorted({int(i) for i in source_ids})
        sqlite = self._driver.dialect == "sqlite"
        if sqlite:
            # SQLite checks a deleted span's children by scanning the table
            # for each (samples.parent_id has no index): rm deletes every
            # child itself, so the checks are off for its transaction only.
            self._driver.execute("PRAGMA foreign_keys = OFF", ())
        try:
            with self._write():
                removed = _core.store_remove(self._driver, self._driver.dialect, ids)
                if isinstance(removed, tuple):
                    raise StoreError(removed[1], kind=removed[0], target=self.target)
        finally:
            if sqlite:
                self._driver.execute("PRAGMA foreign_keys = ON", ())
        return removed

    def find(self, content_hash: str) -> Optional[int]:
        """The first source whose content hash (sha256 hex of the file it was
        added from) is `content_hash`; None if none (or a store before 2.4)."""
        if self._version() < (2, 4):
            return None
        rows = self._driver.query(
            "SELECT min(source_id) FROM sources WHERE content_hash = ?", (content_hash,)
        )
        return rows[0][0] if rows and rows[0][0] is not None else None

    def _check_duplicate(self, content_hash: Optional[str], path: str, allow: bool) -> None:
        if content_hash and not allow:
            found = self.find(content_hash)
            if found is not None:
                raise DuplicateSource(self.target, path, found)

    @contextlib.contextmanager
    def _adding(self, content_hash: Optional[str], path: str, allow: bool):
        """The add's transaction, in which the content hash is checked again
        (another writer may have added the same file meanwhile: SQLite's
        write lock, or PostgreSQL's advisory lock on the hash, orders them).
        Yields the hash to store ("" for none, or a store before 2.4)."""
        with self._write():
            hashed = content_hash if content_hash and self._version() >= (2, 4) else ""
            if hashed and self._driver.dialect == "postgres":
                self._driver.query("SELECT pg_advisory_xact_lock(?)", (int(hashed[:15], 16),))
            self._check_duplicate(hashed, path, allow)
            yield hashed

    # -- reading -------------------------------------------------------------

    def load_stacks(self, source_id: int):
        """The sampled stacks of a source imported from pprof, py-spy,
        speedscope's sampled profiles or folded stacks (`_core.StackSamples`)."""
        result = _core.store_read_stacks(self._driver, self._driver.dialect, int(source_id))
        if isinstance(result, tuple):
            raise StoreError(result[1], kind=result[0], target=self.target)
        return result

    def load(self, source_id: int):
        """The profile of one source, as a ProfileSession (the same tree it was added as)."""
        from ._session import ProfileSession

        result = _core.store_read(self._driver, self._driver.dialect, int(source_id))
        if isinstance(result, tuple):
            raise StoreError(result[1], kind=result[0], target=self.target)
        return ProfileSession._from_profile(result)

    def sources(self) -> List[Dict[str, Any]]:
        """One dict per source, oldest first: its id, type, uri, host, pid,
        model, version, run id, when it was captured (Unix ns; None when its
        file does not say) and added, the tool that made it (``py-spy@0.4.3``;
        None when its file does not say), its content hash, and its number
        of sessions and spans (or samples)."""
        v2_4 = self._version() >= (2, 4)
        rows = self._driver.query(
            "SELECT s.source_id, s.source_type, s.sample_kind, s.source_uri, s.host, s.pid, s.model_name, s.model_version, "
            f"s.run_id, {'s.start_unix_ns' if v2_4 else 's.source_timestamp'}, s.added_unix_ns, s.end_ns - s.start_ns, "
            f"{'s.tool, s.content_hash' if v2_4 else 'NULL, NULL'}, "
            "(SELECT count(*) FROM sessions se WHERE se.source_id = s.source_id), "
            "(SELECT CAST(coalesce(sum(se.sample_count), 0) AS BIGINT) FROM sessions se "
            "WHERE se.source_id = s.source_id) "
            "FROM sources s ORDER BY s.source_id",
            (),
        )
        keys = (
            "source_id",
            "source_type",
            "kind",
            "uri",
            "host",
            "pid",
            "model",
            "version",
            "run_id",
            "captured_unix_ns",
            "added_unix_ns",
            "duration_ns",
            "tool",
            "content_hash",
            "sessions",
            "spans",
        )
        return [dict(zip(keys, r)) for r in rows]

    # Provenance a `where` key can name directly, by column.
    _WHERE_COLUMNS = {
        "model": "model_name",
        "version": "model_version",
        "run_id": "run_id",
        "host": "host",
        "type": "source_type",
        "pid": "pid",
        "container": "container",
        "pod": "pod",
    }

    def source_ids(self, where: Optional[Mapping[str, str]] = None) -> List[int]:
        """The ids of the sources matching every `where` {key: value}: the
        key's column (model, version, run_id, host, type, pid, container,
        pod), a label the source was added with, or a key of its meta.
        ``trace_id`` and ``span_id`` match the trace context of any of the
        source's sessions (an MLflow trace id ``tr-...`` is taken too)."""
        sql = "SELECT s.source_id FROM sources s WHERE 1 = 1"
        params: list = []
        for key, value in (where or {}).items():
            if key in ("trace_id", "span_id") and self._has_traces():
                sql += (
                    " AND s.source_id IN (SELECT se.source_id FROM sessions se JOIN session_traces t "
                    f"ON t.session_id = se.session_id WHERE t.{key} = ?)"
                )
                params.append(_trace_hex(str(value)))
                continue
            column = self._WHERE_COLUMNS.get(key)
            clause = f"CAST(s.{column} AS TEXT) = ? OR " if column else ""
            sql += (
                f" AND ({clause}s.source_id IN (SELECT source_id FROM source_labels "
                "WHERE key IN (?, ?) AND value = ?))"
            )
            params += ([str(value)] if column else []) + [LABEL_PREFIX + key, key, str(value)]
        return [r[0] for r in self._driver.query(sql + " ORDER BY s.source_id", tuple(params))]

    def traces(
        self, source_id: Optional[int] = None, *, trace_id: Optional[str] = None
    ) -> List[Dict[str, Any]]:
        """The trace context of each session that had one (the OpenTelemetry
        or MLflow span active where it started), oldest first: source_id,
        pid, session, trace_id, span_id. ``source_id`` keeps one source's;
        ``trace_id`` (hex, or MLflow's ``tr-...``) finds a trace's sessions."""
        if not self._has_traces():
            return []
        sql = (
            "SELECT se.source_id, se.pid, se.serial, t.trace_id, t.span_id FROM session_traces t "
            "JOIN sessions se ON se.session_id = t.session_id WHERE 1 = 1"
        )
        params: list = []
        if source_id is not None:
            sql += " AND se.source_id = ?"
            params.append(int(source_id))
        if trace_id is not None:
            sql += " AND t.trace_id = ?"
            params.append(_trace_hex(trace_id))
        rows = self._driver.query(sql + " ORDER BY se.session_id", tuple(params))
        keys = ("source_id", "pid", "session", "trace_id", "span_id")
        return [dict(zip(keys, r)) for r in rows]

    def _has_traces(self) -> bool:
        """Whether the store has session_traces (version 2.2 and later)."""
        return self._version() >= (2, 2)

    def _version(self) -> Tuple[int, int]:
        """The store's (major, minor) version (a migration may change it)."""
        version = _core.store_version(self._driver, self._driver.dialect)
        major, _, minor = version.partition(".")
        return int(major), int(minor or 0)

    def labels(self, source_id: int) -> Dict[str, str]:
        """The source's provenance: its document's meta and the labels it was added with."""
        rows = self._driver.query(
            "SELECT key, value FROM source_labels WHERE source_id = ? ORDER BY key",
            (int(source_id),),
        )
        return dict(rows)

    # -- exporting -----------------------------------------------------------

    def export_pprof(
        self,
        path: Union[str, os.PathLike],
        source_ids: Optional[Sequence[int]] = None,
        *,
        where: Optional[Mapping[str, str]] = None,
        label_by: Sequence[str] = (),
    ) -> Dict[str, Any]:
        """Writes ONE pprof (gzip-compressed profile.proto) aggregating the
        selected sources: `source_ids`, those matching `where` (as
        source_ids() reads it), both (the ids that match), or every source.
        The core (formats/pprof_aggregate.h) merges identical call paths
        (function names, files and lines from the root) into one sample
        whose values are summed, reading one source at a time: memory holds
        the aggregate, not the sources. A span source gives what its own
        pprof export gives (calls/count and wall/nanoseconds, its self time;
        off_cpu and runq with the agent's data), sampled stacks (imported
        pprof, py-spy) their own types; the sample types are the union, a
        value a source lacks is 0.

        `label_by` keeps sources apart: for each key ("source" for the id,
        model, version, run_id, host, type, pid, or a label or meta key) a
        label with the source's value goes on its samples
        (`go tool pprof -tagfocus=model=fraud`). Returns what was written:
        sources, samples, sample_types and each type's total. StoreError
        (kind 'missing') for an empty selection or an unknown id.

            with open_store("profiles.db") as store:
                store.export_pprof("fraud.pb.gz", where={"model": "fraud"})
        """
        rows = {s["source_id"]: s for s in self.sources()}
        if source_ids is None:
            ids = self.source_ids(where)
        else:
            ids = [int(i) for i in source_ids]
            unknown = [i for i in ids if i not in rows]
            if unknown:
                raise StoreError(
                    f"no source {', '.join(map(str, unknown))} in the store (mlprof show lists them)",
                    kind="missing",
                    target=self.target,
                )
            if where:
                matching = set(self.source_ids(where))
                ids = [i for i in ids if i in matching]
        if not ids:
            what = ", ".join(f"{k}={v}" for k, v in (where or {}).items())
            raise StoreError(
                f"no source matches {what} (mlprof show lists the sources and their provenance)"
                if what
                else "no source to export: the selection is empty",
                kind="missing",
                target=self.target,
            )
        aggregate = _core.PprofAggregate()
        for source_id in ids:
            row = rows[source_id]
            labels = [
                (key, value)
                for key in label_by
                for value in [self._provenance(source_id, row, key)]
                if value
            ]
            aggregate.add_comment(
                f"source {source_id}: {row['source_type']}"
                + (f", {row['uri']}" if row["uri"] else "")
            )
            if row["kind"] == "stacks":
                aggregate.add_samples(self.load_stacks(source_id), labels)
            else:
                profile = _core.store_read(self._driver, self._driver.dialect, source_id)
                if isinstance(profile, tuple):
                    raise StoreError(profile[1], kind=profile[0], target=self.target)
                aggregate.add_profile(profile, labels)
                del profile  # one source in memory at a time
        aggregate.save(os.fspath(path))
        types = aggregate.sample_types
        return {
            "sources": aggregate.sources,
            "samples": aggregate.samples,
            "sample_types": types,
            "totals": {f"{t}/{u}": aggregate.total(t, u) for t, u in types},
        }

    def _provenance(self, source_id: int, row: Mapping[str, Any], key: str) -> str:
        """A source's value for `key`: "source" (its id), a provenance
        column, a label it was added with, or a key of its meta; "" if none."""
        if key == "source":
            return str(source_id)
        column = {
            "model": "model",
            "version": "version",
            "run_id": "run_id",
            "host": "host",
            "type": "source_type",
            "pid": "pid",
        }.get(key)
        if column is not None and row.get(column) not in (None, ""):
            return str(row[column])
        labels = self.labels(source_id)
        return labels.get(LABEL_PREFIX + key) or labels.get(key) or ""

    # -- plumbing ------------------------------------------------------------

    def _write(self):
        if self._batched:
            return contextlib.nullcontext()
        return _Transaction(self._driver)

    @contextlib.contextmanager
    def batch(self):
        """Every add and remove inside is one transaction: all there, or (on
        an exception) none (`mlprof combine`)."""
        if self._batched:
            yield self
            return
        with _Transaction(self._driver):
            self._batched = True
            try:
                yield self
            finally:
                self._batched = False

    def close(self) -> None:
        """Closes the connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an exception: one add is
    all there or not there. Through the driver, so that a damaged file's
    error is a StoreError here too."""

    def __init__(self, driver) -> None:
        self.driver = driver

    def __enter__(self) -> None:
        self.driver.execute(self.driver.begin, ())

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.driver.execute("COMMIT", ())
            return
        try:
            self.driver.execute("ROLLBACK", ())
        except StoreError:
            pass  # the error that ended the transaction is the one to tell


# Whether open_store() creates a store that is not there, when its caller
# does not say: `mlprof`'s read-only commands set it False for their run, so
# no module they call creates a file.
creating: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "mlflow_profiler_store_creating", default=True
)


def open_store(
    target: Union[str, os.PathLike, None] = None, *, create: Optional[bool] = None
) -> Store:
    """Opens the store at `target`: a path or ``sqlite:///path`` for SQLite,
    ``postgresql://user@host:port/db`` for PostgreSQL (needs ``pip install
    'mlflow-profiler[postgres]'``). Without a target, MLFLOW_PROFILER_STORE
    names it. With ``create`` (the default) a store that is not there is
    created (the file, or the schema in an empty database); with
    ``create=False`` (reading) it must exist: StoreError (kind 'missing')
    naming it, and nothing is created. Raises StoreError for a store of
    another version, a database that is not a store, or a server that does
    not answer."""
    if create is None:
        create = creating.get()
    return _open_target(
        target, lambda driver: _core.store_prepare(driver, driver.dialect), create=create
    )


def migrate(target: Union[str, os.PathLike, None] = None) -> Tuple[str, str]:
    """Brings the store at `target` (as open_store takes; it must exist) to
    this mlflow-profiler's schema version in one transaction (`mlprof
    migrate`); returns (version before, version after). Raises StoreError
    (kind 'version') when no migration starts at the store's version, (kind
    'missing') when there is no store there."""
    versions: List[Tuple[str, str]] = []

    def step(driver):
        result = _core.store_migrate(driver, driver.dialect)
        if not isinstance(result, dict):
            return result
        versions.append((result["from"], result["to"]))
        return _core.store_prepare(driver, driver.dialect)

    with _open_target(target, step, create=False):
        return versions[0]


_NO_STORE = "there is no store here (mlprof add creates one)"


def _must_exist(driver, target: str) -> None:
    """StoreError (kind 'missing') when the database has no store's meta
    table: open_store(create=False) refuses it, creating nothing. A read
    outside any transaction (SQLite's write transaction would give an empty
    file its header page)."""
    if not _core.store_present(driver, driver.dialect):
        raise StoreError(
            _NO_STORE
            if driver.dialect == "postgres"
            else "not an mlflow-profiler store (no tables); mlprof add creates one in a new file",
            kind="missing",
            target=target,
        )


def _open_target(target, prepare, create: bool = True) -> Store:
    """Connects to `target` and runs prepare(driver) (None, or an error
    (kind, message)) in the schema transaction. Without `create`, the store
    must be there: a missing file or an empty database is StoreError
    'missing', and nothing is created."""
    if target is None:
        target = os.environ.get("MLFLOW_PROFILER_STORE")
        if not target:
            raise StoreError("no store given, and MLFLOW_PROFILER_STORE is not set", kind="missing")
    target = os.fspath(target)
    if target.startswith(("postgresql://", "postgres://")):
        return _open_postgres(target, prepare, create)
    path = _sqlite_path(target)
    if not create and not os.path.isfile(path):
        raise StoreError(
            f"no such store: {'no such file' if not os.path.exists(path) else 'not a file'} "
            "(mlprof add creates one)",
            kind="missing",
            target=target,
        )
    try:
        if create:
            conn = sqlite3.connect(
                path, isolation_level=None, timeout=_BUSY_TIMEOUT_MS / 1000, check_same_thread=False
            )
        else:  # mode=rw: a file removed meanwhile is an error, not a new store
            uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=rw"
            conn = sqlite3.connect(
                uri,
                uri=True,
                isolation_level=None,
                timeout=_BUSY_TIMEOUT_MS / 1000,
                check_same_thread=False,
            )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the SQLite store: {exc}", kind="io", target=target) from None
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        driver = _SqliteDriver(conn, target)
        if not create:
            _must_exist(driver, target)
        with _Transaction(driver):
            error = prepare(driver)
        if error is not None:
            raise StoreError(error[1], kind=error[0], target=target)
        # WAL: readers never wait for a writer, and writers queue on the busy timeout.
        conn.execute("PRAGMA journal_mode = WAL")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(
            f"not a readable SQLite store: {exc}", kind="corrupt", target=target
        ) from None
    except BaseException:
        conn.close()
        raise
    return Store(target, conn, driver)


_CONNECT_TIMEOUT_S = 5


def _open_postgres(target: str, prepare, create: bool = True) -> Store:
    try:
        import psycopg
    except ImportError:
        raise StoreError(
            "a PostgreSQL store needs psycopg: pip install 'mlflow-profiler[postgres]'",
            kind="missing",
            target=_safe(target),
        ) from None
    try:
        conn = psycopg.connect(target, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreError(
            f"cannot reach the PostgreSQL store: {reason}", kind="unreachable", target=_safe(target)
        ) from None
    driver = _PostgresDriver(conn)
    try:
        if not create:
            _must_exist(driver, _safe(target))
        # One writer at a time creates the schema (an advisory lock: two
        # processes opening a new database at once).
        conn.execute("SELECT pg_advisory_lock(7170687)")
        try:
            with _Transaction(driver):
                error = prepare(driver)
        finally:
            conn.execute("SELECT pg_advisory_unlock(7170687)")
        if error is not None:
            raise StoreError(error[1], kind=error[0], target=_safe(target))
    except BaseException:
        conn.close()
        raise
    return Store(_safe(target), conn, driver)


def _safe(target: str) -> str:
    """The URL without its password, for messages."""
    scheme, sep, rest = target.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at or ":" not in creds:
        return target
    return f"{scheme}{sep}{creds.split(':', 1)[0]}:***@{host}"


_open: Dict[str, Store] = {}
_open_lock = threading.Lock()


def add_quietly(target: str, session, labels: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """Adds a session to the store at `target` for the profiler's own
    writers (autoprofile's exporter, log_profile with MLFLOW_PROFILER_STORE):
    the store stays open for the process, and a failure (a server down, a
    full disk, a store of another version) is logged once and returns None:
    it never reaches the model."""
    try:
        with _open_lock:
            store = _open.get(target)
            if store is None:
                store = _open[target] = open_store(target)
            return store.add(session, labels=labels)
    except Exception as exc:
        with _open_lock:
            broken = _open.pop(target, None)
        if broken is not None:
            try:
                broken.close()
            except Exception:
                pass
        log_once(
            f"store-add:{type(exc).__name__}",
            f"mlflow_profiler: adding a profile to the store failed: {exc}",
        )
        return None
