#include "summarize.h"

namespace mlprof {

void summarize_object(PyObject* obj, IOSummary* out) {
  out->type_name = Py_TYPE(obj)->tp_name;
}

}  // namespace mlprof
