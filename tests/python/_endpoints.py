"""Real HTTP endpoints on 127.0.0.1 for the tests of waiting models: aiohttp
servers in a thread of their own, each answering POST and GET on any path
after a deliberate latency, optionally behind a server-side semaphore, and
logging each request it handled as (name, t0, t1) in perf_counter_ns."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Dict, Iterator, Optional


@contextlib.contextmanager
def serve(
    latency: Dict[str, float],
    slots: Optional[Dict[str, int]] = None,
    answers: Optional[Dict[str, list]] = None,
) -> Iterator[dict]:
    """Starts one server per name of `latency` (seconds); yields {"urls":
    {name: "http://127.0.0.1:PORT/v1/responses"}, "ports": {name: PORT},
    "handled": [(name, t0, t1)], "answers": answers}. `slots`: a server-side
    semaphore per name, so requests beyond it queue in the server.
    `answers`: per name, the statuses of its next requests, in order, each
    (status, Retry-After header or None); 200 once the list is empty (the
    test may refill it)."""
    from aiohttp import web

    handled: list = []
    scripted: dict = answers if answers is not None else {}
    urls: dict = {}
    ports: dict = {}
    ready = threading.Event()
    loop = asyncio.new_event_loop()

    def handler(name):
        async def handle(request):
            t0 = time.perf_counter_ns()
            body = await request.json() if request.can_read_body else {}
            gate = gates.get(name)
            if gate is not None:
                async with gate:
                    await asyncio.sleep(latency[name])
            else:
                await asyncio.sleep(latency[name])
            handled.append((name, t0, time.perf_counter_ns()))
            script = scripted.get(name)
            if script:
                status, retry_after = script.pop(0)
                headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
                return web.json_response({"error": status}, status=status, headers=headers)
            return web.json_response({"answer": f"{name}: {body.get('ticket', '')} resolved"})

        return handle

    gates: dict = {}

    async def start():
        runners = []
        for name, n in (slots or {}).items():
            gates[name] = asyncio.Semaphore(n)
        for name in latency:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handler(name))
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            ports[name] = runner.addresses[0][1]
            urls[name] = f"http://127.0.0.1:{ports[name]}/v1/responses"
            runners.append(runner)
        return runners

    def run():
        asyncio.set_event_loop(loop)
        runners = loop.run_until_complete(start())
        ready.set()
        loop.run_forever()
        for r in runners:
            loop.run_until_complete(r.cleanup())
        loop.close()

    t = threading.Thread(target=run, name="endpoints", daemon=True)
    t.start()
    assert ready.wait(30)
    try:
        yield {"urls": urls, "ports": ports, "handled": handled, "answers": scripted}
    finally:
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
