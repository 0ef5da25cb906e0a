#include <gtest/gtest.h>
// placeholder until this suite lands
