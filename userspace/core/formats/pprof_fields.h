#pragma once
// Field numbers of pprof's profile.proto
// (github.com/google/pprof/proto/profile.proto): the writer
// (export_pprof.cpp) and the reader (import_pprof.cpp) share them.

#include <cstdint>

namespace mlprof::pprof_field {
constexpr uint32_t kSampleType = 1, kSample = 2, kMapping = 3, kLocation = 4, kFunction = 5,
                   kStringTable = 6, kTimeNanos = 9, kDurationNanos = 10, kPeriodType = 11,
                   kPeriod = 12, kComment = 13, kDefaultSampleType = 14;
constexpr uint32_t kValueTypeType = 1, kValueTypeUnit = 2;
constexpr uint32_t kSampleLocationId = 1, kSampleValue = 2, kSampleLabel = 3;
constexpr uint32_t kLabelKey = 1, kLabelStr = 2, kLabelNum = 3;
constexpr uint32_t kLocationId = 1, kLocationLine = 4;
constexpr uint32_t kLineFunctionId = 1, kLineLine = 2;
constexpr uint32_t kFunctionId = 1, kFunctionName = 2, kFunctionSystemName = 3,
                   kFunctionFilename = 4, kFunctionStartLine = 5;
}  // namespace mlprof::pprof_field
