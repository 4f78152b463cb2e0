"""A small model server for the VM walkthrough (docs/ebpf.md, "Diagnosis in
a VM"): stdlib only, so that it starts in seconds under emulation.

    python vmtests/example_server.py --port 8080

POST /predict with a JSON list of numbers: each request is one
`profiling(depth=2)` session of `Model.predict`, whose steps are _parse,
_features (CPU), _lookup (a 5 ms wait, as a feature store call would) and
_score. Prints "listening PORT" once it accepts requests.
"""

import argparse
import http.server
import json
import math
import time

from mlflow_profiler import profiling


class Model:
    """predict(): the model's steps, one span each."""

    def predict(self, body: bytes):
        rows = self._parse(body)
        feats = self._features(rows)
        self._lookup()
        return self._score(feats)

    def _parse(self, body):
        return json.loads(body or b"[]")

    def _features(self, rows):
        return [math.log1p(abs(x)) * math.sqrt(abs(x) + 1) for x in rows for _ in range(200)]

    def _lookup(self):
        time.sleep(0.005)

    def _score(self, feats):
        return sum(feats) / max(len(feats), 1)


MODEL = Model()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with profiling(depth=2):
            score = MODEL.predict(body)
        out = json.dumps({"score": score}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    args = ap.parse_args()
    server = http.server.HTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
