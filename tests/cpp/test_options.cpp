#include <gtest/gtest.h>
// placeholder: filled by issue 5 work
TEST(Placeholder_options, Empty) {}
