#pragma once
// The trace context active where a session starts (docs/capture.md,
// "Traces"): the OpenTelemetry or MLflow span around predict, so that a
// profile is found from its trace and the trace from its profile.

#include <string>

namespace mlprof::trace_context {

// Fills trace_id (32 lower-case hex digits) and span_id (16) from
// mlflow_profiler._traces.current() when OpenTelemetry is imported (MLflow's
// tracing imports it); leaves them empty otherwise, or when no span is
// active. Runs untraced (no session records it). Never raises: a failure is
// logged once by the caller's note and the ids stay empty.
void read(std::string* trace_id, std::string* span_id, std::string* error);

}  // namespace mlprof::trace_context
