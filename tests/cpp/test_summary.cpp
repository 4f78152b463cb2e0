#include <gtest/gtest.h>

#include "core/summary.h"
