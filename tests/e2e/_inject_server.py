"""A model server that never imports mlflow_profiler: the target of
`mlprof-ebpf --pid P --inject` in tests/e2e/test_agent_inject.py.

With --model (needs MLflow): an MLflow pyfunc model saved with
mlflow.pyfunc.save_model and loaded back with load_model, served by the
standard library's ThreadingHTTPServer: POST /predict runs model.predict()
and answers {"t0", "t1"} (time.perf_counter_ns(), CLOCK_MONOTONIC, around
the call) and "profiler": whether mlflow_profiler is in sys.modules now.
Without --model: the same server with no model (POST /predict answers
{"t0", "t1"} at once): the refusal tests need no MLflow.

Prints one JSON line when serving: {"port", "pid", "python", "imported"},
imported being whether mlflow_profiler was in sys.modules then; "quit" or
EOF on stdin stops it. The main
thread runs serve_forever(), which runs Python code at least every 0.5 s
(its poll interval): that is where the injected script runs. With --block
the server runs in another thread and the main thread waits in C (an
Event's lock, no timeout) until "wake" on stdin, then runs Python again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if "--model" in sys.argv:  # at module level: the spans are named InjectModel.<method>
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MLflow's type-hint advice: not ours
        import mlflow.pyfunc

        class InjectModel(mlflow.pyfunc.PythonModel):
            def predict(self, context, model_input, params=None):
                self._features()
                self._wait()
                return [1.0]

            def _features(self):
                return sum(i * i for i in range(2000))

            def _wait(self):
                time.sleep(0.005)


def load_model():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = os.path.join(tempfile.mkdtemp(prefix="mlprof-e2e-inject-model-"), "model")
        mlflow.pyfunc.save_model(path, python_model=InjectModel(), pip_requirements=[])
        return mlflow.pyfunc.load_model(path)


def say_ready_when_blocked(ready: str) -> None:
    """Prints the ready line once the main thread is blocked in wake.wait()
    (in threading's wait, asleep at three looks 20 ms apart): printed
    before, a busy machine could let the agent's script in before the main
    thread got there, and it would run."""
    main = threading.main_thread()
    asleep = 0
    while asleep < 3:
        time.sleep(0.02)
        frame = sys._current_frames().get(main.ident)
        with open(f"/proc/self/task/{main.native_id}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        in_wait = frame is not None and frame.f_code.co_name == "wait"
        asleep = asleep + 1 if in_wait and state == "S" else 0
    print(ready, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="store_true")
    ap.add_argument("--block", action="store_true")
    args = ap.parse_args()
    model = load_model() if args.model else None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            n = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(n)
            t0 = time.perf_counter_ns()
            if model is not None:
                model.predict([[1.0, 2.0]])
            t1 = time.perf_counter_ns()
            body = json.dumps(
                {"t0": t0, "t1": t1, "profiler": "mlflow_profiler" in sys.modules}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):  # quiet: stderr is checked for tracebacks
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ready = json.dumps(
        {
            "port": server.server_address[1],
            "pid": os.getpid(),
            "python": "%d.%d" % sys.version_info[:2],
            "imported": "mlflow_profiler" in sys.modules,
        }
    )
    if not args.block:
        print(ready, flush=True)

    wake = threading.Event()

    def until_quit() -> None:  # "quit" or EOF on stdin (the tests' LineProcess.close)
        for line in sys.stdin:
            if line.strip() == "wake":
                wake.set()
                print(json.dumps({"woken": True}), flush=True)
            if line.strip() == "quit":
                break
        server.shutdown()
        wake.set()

    threading.Thread(target=until_quit, daemon=True).start()
    if not args.block:
        server.serve_forever(poll_interval=0.5)
        return 0
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5})
    serving.start()
    threading.Thread(target=say_ready_when_blocked, args=(ready,), daemon=True).start()
    wake.wait()  # in C: no eval-breaker check until woken
    while serving.is_alive():
        serving.join(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
