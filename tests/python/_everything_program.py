"""A program that uses what a model's code may use (recursion to the limit,
generators driven by send/throw/close, async generators, tasks, to_thread,
finalizers, a signal handler, sys.settrace/setprofile of its own, threads,
copied contexts, eval/exec, a metaclass, __slots__) and prints its result as
JSON. test_never_breaks.py runs it bare and inside sessions: the output must
be the same. Warnings are errors here, as under `python -W error`."""

import asyncio
import contextvars
import functools
import gc
import itertools
import os
import signal
import sys
import threading
import warnings

warnings.simplefilter("error")


def rec_until_error(n=0):
    try:
        return rec_until_error(n + 1)
    except RecursionError:
        return n


def gen_inner():
    try:
        x = yield 1
        while True:
            x = yield x * 2
    except GeneratorExit:
        raise
    except ValueError as e:
        yield "caught:" + str(e)


def gen_outer():
    r = yield from gen_inner()
    return r


def gens():
    out = []
    g = gen_outer()
    out.append(next(g))
    out.append(g.send(5))
    out.append(g.throw(ValueError("v")))
    g.close()
    g2 = gen_inner()
    next(g2)
    del g2
    gc.collect()
    out.append(list(itertools.islice((i * i for i in range(100)), 5)))
    out.append(sum(x for x in range(50) if x % 3))
    return out


async def agen():
    for i in range(3):
        await asyncio.sleep(0)
        yield i


async def amain():
    res = [v async for v in agen()]
    ag = agen()
    res.append(await ag.__anext__())
    await ag.aclose()
    t = asyncio.ensure_future(asyncio.sleep(0.001, "slept"))
    res.append(await asyncio.wait_for(t, 1))

    async def boom():
        raise KeyError("k")

    try:
        await asyncio.gather(boom(), asyncio.sleep(0))
    except KeyError as e:
        res.append(repr(e))
    res.append(await asyncio.to_thread(sum, [1, 2, 3]))
    return res


class Finalized:
    hits = []

    def __del__(self):
        Finalized.hits.append(len(gens()))


def with_finalizers():
    for _ in range(3):
        Finalized()
    gc.collect()
    return len(Finalized.hits)


def with_signal():
    got = []
    old = signal.signal(signal.SIGUSR1, lambda s, f: got.append(sum(range(10))))
    os.kill(os.getpid(), signal.SIGUSR1)
    for _ in range(1000):
        if got:
            break
    signal.signal(signal.SIGUSR1, old)
    return got


def user_hooks():
    seen = []

    def tracer(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "leaf":
            seen.append("trace")
        return None

    def prof(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "leaf":
            seen.append("prof")

    def leaf():
        return 1

    old_t, old_p = sys.gettrace(), sys.getprofile()
    sys.settrace(tracer)
    leaf()
    sys.settrace(old_t)
    sys.setprofile(prof)
    leaf()
    sys.setprofile(old_p)
    return seen


def threads():
    res = {}

    def work(i):
        res[i] = sum(gens()[4] for _ in range(3))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ctx = contextvars.copy_context()
    res["ctx"] = ctx.run(lambda: len(gens()))
    return sorted(res.items(), key=str)


def misc():
    out = []
    out.append(eval("sum(i for i in range(5))"))
    ns = {}
    exec("def f(x):\n    return [y*2 for y in range(x)]\nr = f(4)", ns)
    out.append(ns["r"])

    class Meta(type):
        def __call__(cls, *a):
            return super().__call__(*a)

    class K(metaclass=Meta):
        __slots__ = ("v",)

        def __init__(self, v):
            self.v = v

        def __repr__(self):
            return f"K({self.v})"

    out.append(repr(K(3)))
    p = functools.partial(max, 3)
    out.append(p(9))
    out.append(sorted([3, 1, 2], key=lambda v: -v))
    try:
        sys.setrecursionlimit(sys.getrecursionlimit())
    except Exception as e:
        out.append(repr(e))
    return out


def program():
    return {
        "rec": rec_until_error() > 100,
        "gens": gens(),
        "async": asyncio.run(amain()),
        "fin": with_finalizers(),
        "sig": with_signal(),
        "hooks": user_hooks(),
        "threads": threads(),
        "misc": misc(),
    }


if __name__ == "__main__":
    import json

    mode = sys.argv[1]
    if mode == "bare":
        r = program()
    else:
        import mlflow_profiler as mp

        with mp.profiling(depth=int(mode), all_threads=True, capture_io=True) as s:
            r = program()
        st = s.statistics()
        r["session"] = {"failures": st["failures"], "spans": st["span_count"] > 0}
        s.format_tree()
        s.to_json()
    print(json.dumps(r, sort_keys=True, default=repr))
