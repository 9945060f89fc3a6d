#include <gtest/gtest.h>

#include "mltool/util/error.hpp"

TEST(Error, KindsMapToTheDocumentedExitCodes) {
  EXPECT_EQ(mltool::exit_code_for(mltool::UsageError("x").kind()), 1);
  EXPECT_EQ(mltool::exit_code_for(mltool::InputError("x").kind()), 2);
  EXPECT_EQ(mltool::exit_code_for(mltool::FormatError("x").kind()), 2);
  EXPECT_EQ(mltool::exit_code_for(mltool::ResourceError("x").kind()), 3);
}

TEST(Error, MessagesNameTheFileAndOffset) {
  EXPECT_EQ(mltool::at_offset("a.tfrecord", 12, "bad"), "a.tfrecord: byte 12: bad");
  EXPECT_EQ(mltool::at_file("f.npy", "bad"), "f.npy: bad");
}
