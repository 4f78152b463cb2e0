"""What reading the trace context costs a session (docs/capture.md,
"Traces"): a native session's start and stop, best of 5 runs of N, with
OpenTelemetry not imported, imported, inside an OpenTelemetry span, with
MLflow imported, and inside an MLflow span. Needs MLflow 3 (it brings the
OpenTelemetry SDK).

    python bench/bench_trace_context.py [N]
"""

import sys
import time

from mlflow_profiler import ProfileSession


def per_session_ns(n: int) -> float:
    """Best of 5: ns per session started and stopped with nothing inside."""
    best = []
    for _ in range(5):
        t = time.perf_counter_ns()
        for _ in range(n):
            s = ProfileSession._make(1, 1000, False, False, False, None, "native", (), None)
            s.__enter__()
            s.__exit__(None, None, None)
        best.append((time.perf_counter_ns() - t) / n)
    return min(best)


def main() -> None:
    """Prints each case's ns per session and its ratio to the first."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    if "opentelemetry.trace" in sys.modules:
        sys.exit("run it in a fresh interpreter: OpenTelemetry is already imported")
    rows = [("OpenTelemetry not imported", per_session_ns(n))]
    import opentelemetry.trace  # noqa: F401
    from opentelemetry.sdk.trace import TracerProvider

    rows.append(("OpenTelemetry imported, no span", per_session_ns(n)))
    with TracerProvider().get_tracer("bench").start_as_current_span("request"):
        rows.append(("inside an OpenTelemetry span", per_session_ns(n)))
    import mlflow

    rows.append(("MLflow imported, no span", per_session_ns(n)))
    with mlflow.start_span("predict"):
        rows.append(("inside an MLflow span", per_session_ns(n)))
    base = rows[0][1]
    for name, ns in rows:
        print(f"{name:34s} {ns:8.0f} ns  {ns / base:5.2f}x")


if __name__ == "__main__":
    main()
