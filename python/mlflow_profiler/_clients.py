"""Resources named from the HTTP clients a model calls (docs/capture.md,
"Resources"): each aiohttp or httpx request is a call to its server, as if
the user had written `profile_block("POST host:port", resource="host:port")`
around it. The request method is wrapped once, when mlflow_profiler is
imported or at the first session start after the library is; with no
session active the wrapper only calls the original. A span the user named a
resource for keeps its name: the request's block is then left out
(block_enter's `automatic`). An answer 429 is a "rate limited" instant
(with its Retry-After), and a request that repeats the one its task or
thread last sent to that host, which failed (an exception, 429 or 5xx), is
a "retry N" instant (_marks.py)."""

from __future__ import annotations

import email.utils
import functools
import json
import sys
import threading
import time
import types
import weakref
from typing import Any, Callable, List, Optional, Tuple
from urllib.parse import urlsplit

from . import _core, _marks

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def authority(url: Any) -> Optional[str]:
    """`host` or `host:port` (a port that is not the scheme's default) of a
    URL (a str, yarl.URL or httpx.URL); None when it names no host."""
    try:
        parts = urlsplit(str(url))
        host, port = parts.hostname, parts.port
    except (ValueError, TypeError):
        return None
    if not host:
        return None
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address, as written in a URL
    if port is None or _DEFAULT_PORTS.get(parts.scheme) == port:
        return host
    return f"{host}:{port}"


def _aiohttp_host(session: Any, url: Any) -> Optional[str]:
    """The request's server: a relative URL's is the session's base_url's
    (aiohttp 3.8+)."""
    host = authority(url)
    if host is None:
        base = getattr(session, "_base_url", None)
        host = authority(base) if base is not None else None
    return host


def _call(method: Any, host: str):
    """The request's block: `POST host:port`, a call to resource `host:port`."""
    return _core.profile_block(f"{str(method).upper()} {host}", host, automatic=True)


# The last failed request of each task or thread, by host: (identity, failures in a row).
_failures: weakref.WeakKeyDictionary[Any, dict] = weakref.WeakKeyDictionary()
_warned: List[str] = []


def _owner() -> Any:
    """The asyncio task running here, else the thread: whose requests a retry repeats."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is not None:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop in this thread
            task = None
        if task is not None:
            return task
    return threading.current_thread()


def _retry_after(value: Any) -> Optional[float]:
    """Retry-After in seconds: a number, or an HTTP date from now; None if neither."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError, IndexError):
        return None
    return None if when is None else max(0.0, round(when.timestamp() - time.time(), 3))


def _body_key(body: Any) -> Any:
    """What identifies a request's body: bytes and str as they are, JSON by
    its canonical text, anything else (a stream, a form) unknown (None)."""
    if isinstance(body, (bytes, str)):
        return body
    try:
        return json.dumps(body, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return None


class _Attempt:
    """One request of a session: a "retry N" instant when it repeats the
    request its task or thread last sent to the host and that failed; after
    it, a "rate limited" instant for a 429, and the failure remembered (an
    exception, 429, 5xx) or forgotten (any other answer). Its own failures
    are logged once and never reach the model."""

    __slots__ = ("host", "of", "owner", "_identity")
    _identity: Any  # identity, then what it returned

    def __init__(self, host: str, identity: Callable[..., tuple], *of: Any) -> None:
        # identity(*of): what the request is (method, URL, body), computed
        # only when a failure is to be compared or remembered.
        self.host, self.of, self.owner, self._identity = host, of, None, identity
        try:
            self.owner = _owner()
            last = _failures.get(self.owner, {}).get(host)
            if last is not None and self.identity() == last[0]:
                _marks.retry(host, last[1])
        except Exception as exc:  # never into the model
            _warn(exc)

    def identity(self) -> tuple:
        """The request's (method, URL, body), computed once."""
        if callable(self._identity):
            self._identity = self._identity(*self.of)
        return self._identity

    def answered(self, status: Any, retry_after: Any = None) -> None:
        """The server's answer: its HTTP status and Retry-After header."""
        try:
            if status == 429:
                _marks.rate_limit_hit(self.host, _retry_after(retry_after))
            failed = isinstance(status, int) and (status == 429 or status >= 500)
            self._remember(failed)
        except Exception as exc:
            _warn(exc)

    def raised(self) -> None:
        """The request raised (a connection error, a timeout)."""
        try:
            self._remember(True)
        except Exception as exc:
            _warn(exc)

    def _remember(self, failed: bool) -> None:
        if self.owner is None:
            return
        hosts = _failures.get(self.owner)
        if not failed:
            if hosts:
                hosts.pop(self.host, None)
            return
        identity = self.identity()
        last = hosts.get(self.host) if hosts else None
        count = last[1] + 1 if last is not None and last[0] == identity else 1
        _failures.setdefault(self.owner, {})[self.host] = (identity, count)


def _warn(exc: Exception) -> None:
    import logging

    why = f"retry and rate-limit instants: {type(exc).__name__}: {exc}"
    if why not in _warned:
        _warned.append(why)
        logging.getLogger("mlflow_profiler").warning("%s (logged once)", why)


def _wrap_aiohttp(original: Callable) -> Callable:
    @functools.wraps(original)
    async def _request(self, method, str_or_url, *args, **kwargs):
        host = _aiohttp_host(self, str_or_url) if _core.collecting() else None
        if host is None:
            return await original(self, method, str_or_url, *args, **kwargs)
        with _call(method, host):
            attempt = _Attempt(host, _aiohttp_identity, method, str_or_url, kwargs)
            try:
                response = await original(self, method, str_or_url, *args, **kwargs)
            except Exception:
                attempt.raised()
                raise
            attempt.answered(
                getattr(response, "status", None),
                getattr(response, "headers", {}).get("Retry-After"),
            )
            return response

    return _request


def _aiohttp_identity(method: Any, url: Any, kwargs: dict) -> tuple:
    return str(method).upper(), str(url), _body_key(kwargs.get("json", kwargs.get("data")))


def _httpx_identity(request: Any) -> tuple:
    try:
        body = bytes(request.content)
    except Exception:  # a stream not read yet
        body = None
    return str(getattr(request, "method", "?")).upper(), str(getattr(request, "url", "")), body


def _wrap_httpx_async(original: Callable) -> Callable:
    @functools.wraps(original)
    async def send(self, request, *args, **kwargs):
        host = authority(getattr(request, "url", None)) if _core.collecting() else None
        if host is None:
            return await original(self, request, *args, **kwargs)
        with _call(getattr(request, "method", "?"), host):
            attempt = _Attempt(host, _httpx_identity, request)
            try:
                response = await original(self, request, *args, **kwargs)
            except Exception:
                attempt.raised()
                raise
            attempt.answered(
                getattr(response, "status_code", None),
                getattr(response, "headers", {}).get("Retry-After"),
            )
            return response

    return send


def _wrap_httpx(original: Callable) -> Callable:
    @functools.wraps(original)
    def send(self, request, *args, **kwargs):
        host = authority(getattr(request, "url", None)) if _core.collecting() else None
        if host is None:
            return original(self, request, *args, **kwargs)
        with _call(getattr(request, "method", "?"), host):
            attempt = _Attempt(host, _httpx_identity, request)
            try:
                response = original(self, request, *args, **kwargs)
            except Exception:
                attempt.raised()
                raise
            attempt.answered(
                getattr(response, "status_code", None),
                getattr(response, "headers", {}).get("Retry-After"),
            )
            return response

    return send


def helpers() -> List[Callable]:
    """The functions the wrappers call for their own work: hidden, with
    all they call (_transparent), so no node of the tree is the profiler's."""
    return [
        authority,
        _aiohttp_host,
        _call,
        _owner,
        _retry_after,
        _body_key,
        _warn,
        _aiohttp_identity,
        _httpx_identity,
        _Attempt.__init__,
        _Attempt.identity,
        _Attempt.answered,
        _Attempt.raised,
        _Attempt._remember,
        _marks.mark,
        _marks.rate_limit_hit,
        _marks.retry,
    ]


# (module, class, method, its library's module prefix, wrapper factory)
_TARGETS = (
    ("aiohttp.client", "ClientSession", "_request", "aiohttp", _wrap_aiohttp),
    ("httpx._client", "AsyncClient", "send", "httpx", _wrap_httpx_async),
    ("httpx._client", "Client", "send", "httpx", _wrap_httpx),
)
_done: set = set()


def refresh() -> Tuple[List[Callable], List[str]]:
    """Wraps the request methods of the clients imported since the last call
    (each once, and only while it is the library's own function: another
    tool's patch is left alone). Returns the wrappers installed now, for the
    caller to make transparent, and the libraries they wrap (each once)."""
    installed: List[Callable] = []
    libraries: List[str] = []
    for module_name, cls_name, attr, library, wrap in _TARGETS:
        key = (module_name, cls_name, attr)
        module = sys.modules.get(module_name)
        if key in _done or module is None:
            continue
        cls = getattr(module, "__dict__", {}).get(cls_name)
        original = getattr(cls, "__dict__", {}).get(attr) if isinstance(cls, type) else None
        if original is None:
            continue  # still being imported: tried again at the next start
        _done.add(key)
        if type(original) is not types.FunctionType or not str(original.__module__).startswith(
            library
        ):
            continue
        wrapper = wrap(original)
        setattr(cls, attr, wrapper)
        installed.append(wrapper)
        if library not in libraries:  # httpx: two methods, one scan of its finalizers
            libraries.append(library)
    return installed, libraries
