#include "core/summary.h"
