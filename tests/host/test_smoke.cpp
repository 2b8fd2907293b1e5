#include <gtest/gtest.h>

#include "board/runtime.h"

TEST(Runtime, ClusterNamesAreChecked) {
  EXPECT_TRUE(ulnic::board::check_cluster_name("lab-1").has_value());
  EXPECT_FALSE(ulnic::board::check_cluster_name("../x").has_value());
}
