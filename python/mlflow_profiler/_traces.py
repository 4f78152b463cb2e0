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


def context_slots() -> Optional[Tuple[object, Tuple[Tuple[str, str, object, object], ...]]]:
    """Where `current()` looks, for the native engine's quick test that no
    span is active (most predicts; `current()` costs about 3 us):
    ``(span key, ((module, attribute, runtime context, its ContextVar), ...))``.
    A context holds a span only if its ContextVar's Context has the key; the
    runtime contexts are the module attributes named, checked by identity
    before each use. None (or a slot whose variable is not a ContextVar):
    `current()` must be asked every time."""
    try:
        modules = sys.modules
        propagation = modules.get("opentelemetry.trace.propagation")
        context = modules.get("opentelemetry.context")
        if propagation is None or context is None:
            return None
        holders = [("opentelemetry.context", "_RUNTIME_CONTEXT")]
        provider = modules.get("mlflow.tracing.provider")
        if provider is not None:
            if not hasattr(provider, "mlflow_runtime_context"):
                return None  # an MLflow whose own context current() reads by a call
            holders.append(("mlflow.tracing.provider", "mlflow_runtime_context"))
        slots = []
        for module, attribute in holders:
            runtime = getattr(modules[module], attribute)
            var = getattr(runtime, "_current_context", None)  # the caller checks its type
            slots.append((module, attribute, runtime, var))
        return propagation._SPAN_KEY, tuple(slots)
    except Exception:  # an OpenTelemetry laid out otherwise: current() every time
        return None
