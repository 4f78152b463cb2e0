"""The trace context active where a session starts (docs/capture.md,
"Traces"). The native engine calls `current()` from C++ (pyext/
trace_context.cpp) only when OpenTelemetry is imported, untraced; the
reference engine calls it directly. Zero imports: it reads what the
process already loaded."""

import sys
from typing import Optional, Tuple


def current() -> Optional[Tuple[str, str]]:
    """(trace_id, span_id) of the span active in this context, as lower-case
    hex (32 and 16 digits), or None. MLflow's span (MLflow keeps its own
    context unless it shares OpenTelemetry's) is looked up first, then
    OpenTelemetry's. With MLflow 3 the MLflow trace id is ``"tr-" +
    trace_id``. Never raises."""
    try:
        modules = sys.modules
        otel = modules.get("opentelemetry.trace")
        if otel is None:
            return None
        spans = []
        provider = modules.get("mlflow.tracing.provider")
        if provider is not None:
            # MLflow's own context (3.x keeps one apart from OpenTelemetry's),
            # read directly: get_current_otel_span() reads an environment
            # variable each call, about 4 us, at every predict.
            context = getattr(provider, "mlflow_runtime_context", None)
            if context is not None:
                spans.append(otel.get_current_span(context.get_current()))
            elif hasattr(provider, "get_current_otel_span"):
                spans.append(provider.get_current_otel_span())
        spans.append(otel.get_current_span())
        for span in spans:
            ctx = span.get_span_context() if span is not None else None
            if ctx is not None and ctx.is_valid:
                return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
    except Exception:  # a tracing library's failure must not reach the model
        return None
    return None
