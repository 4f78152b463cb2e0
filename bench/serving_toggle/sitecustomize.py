"""bench_serving.py's switch inside the scoring server, loaded through
PYTHONPATH only by that benchmark: SIGUSR1 turns autoprofile off (the exact
original predict is back) after writing what is queued, so the writing is
charged to the profiled slot; SIGUSR2 turns it on again with the
environment's settings, or without the output directory (capture only) when
MLPROF_BENCH_TOGGLE + ".want" says "capture". Each switch writes the new state to
MLPROF_BENCH_TOGGLE, a file the benchmark waits on. One server is then
measured both ways, alternating, so the difference between two server
instances drops out."""

import os
import signal

_STATE_FILE = os.environ.get("MLPROF_BENCH_TOGGLE")


def _switch(on: bool) -> None:
    from mlflow_profiler import _bootstrap, _env, autoprofile, flush

    if on:
        settings = _env.read()
        try:
            with open(_STATE_FILE + ".want") as f:
                if f.read() == "capture":
                    settings["output_dir"] = None
        except OSError:
            pass
        _bootstrap._enable(settings)
    else:
        autoprofile(disable=True)
        flush(30)
    with open(_STATE_FILE + ".tmp", "w") as f:
        f.write("on" if on else "off")
    os.replace(_STATE_FILE + ".tmp", _STATE_FILE)


if _STATE_FILE:
    signal.signal(signal.SIGUSR1, lambda *_: _switch(False))
    signal.signal(signal.SIGUSR2, lambda *_: _switch(True))
