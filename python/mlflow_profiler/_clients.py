"""Resources named from the HTTP clients a model calls (docs/capture.md,
"Resources"): each aiohttp or httpx request is a call to its server, as if
the user had written `profile_block("POST host:port", resource="host:port")`
around it. The request method is wrapped once, when mlflow_profiler is
imported or at the first session start after the library is; with no
session active the wrapper only calls the original. A span the user named a
resource for keeps its name: the request's block is then left out
(block_enter's `automatic`)."""

from __future__ import annotations

import functools
import sys
import types
from typing import Any, Callable, List, Optional, Tuple
from urllib.parse import urlsplit

from . import _core

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


def _wrap_aiohttp(original: Callable) -> Callable:
    @functools.wraps(original)
    async def _request(self, method, str_or_url, *args, **kwargs):
        host = _aiohttp_host(self, str_or_url) if _core.collecting() else None
        if host is None:
            return await original(self, method, str_or_url, *args, **kwargs)
        with _call(method, host):
            return await original(self, method, str_or_url, *args, **kwargs)

    return _request


def _wrap_httpx_async(original: Callable) -> Callable:
    @functools.wraps(original)
    async def send(self, request, *args, **kwargs):
        host = authority(getattr(request, "url", None)) if _core.collecting() else None
        if host is None:
            return await original(self, request, *args, **kwargs)
        with _call(getattr(request, "method", "?"), host):
            return await original(self, request, *args, **kwargs)

    return send


def _wrap_httpx(original: Callable) -> Callable:
    @functools.wraps(original)
    def send(self, request, *args, **kwargs):
        host = authority(getattr(request, "url", None)) if _core.collecting() else None
        if host is None:
            return original(self, request, *args, **kwargs)
        with _call(getattr(request, "method", "?"), host):
            return original(self, request, *args, **kwargs)

    return send


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
        if type(original) is not types.FunctionType or not str(original.__module__).startswith(library):
            continue
        wrapper = wrap(original)
        setattr(cls, attr, wrapper)
        installed.append(wrapper)
        if library not in libraries:  # httpx: two methods, one scan of its finalizers
            libraries.append(library)
    return installed, libraries
