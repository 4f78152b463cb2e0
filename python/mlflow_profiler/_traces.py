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
        provider = modules.get("mlflow.tracing.provider")
        finder = getattr(provider, "get_current_otel_span", None) if provider is not None else None
        for span in ((finder(),) if finder is not None else ()) + (otel.get_current_span(),):
            ctx = span.get_span_context() if span is not None else None
            if ctx is not None and ctx.is_valid:
                return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"
    except Exception:  # a tracing library's failure must not reach the model
        return None
    return None
