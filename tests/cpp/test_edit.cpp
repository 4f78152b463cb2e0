#include <gtest/gtest.h>

#include "core/edit.h"
