#include "mltool/util/file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mltool/util/error.hpp"
#include "support/temp_dir.hpp"

using mltool::testing::TempDir;
namespace util = mltool::util;

TEST(Paths, JoinAndParent) {
  EXPECT_EQ(util::join_path("a", "b"), "a/b");
  EXPECT_EQ(util::join_path("a/", "b"), "a/b");
  EXPECT_EQ(util::join_path("", "b"), "b");
  EXPECT_EQ(util::parent_directory("a/b/c.txt"), "a/b");
  EXPECT_EQ(util::parent_directory("a//b/"), "a");
  EXPECT_EQ(util::parent_directory("c.txt"), ".");
  EXPECT_EQ(util::parent_directory("/c.txt"), "/");
  EXPECT_EQ(util::parent_directory("/"), "/");
}

TEST(Files, MakeDirectoriesAndRemoveTree) {
  TempDir tmp;
  const auto deep = tmp / "x/y/z";
  util::make_directories(deep);
  EXPECT_TRUE(util::is_directory(deep));
  util::make_directories(deep);  // idempotent
  util::write_file_atomic(deep + "/f.txt", "hello");
  EXPECT_EQ(util::read_file(deep + "/f.txt"), "hello");
  util::remove_tree(tmp / "x");
  EXPECT_FALSE(util::exists(tmp / "x"));
  util::remove_tree(tmp / "x");  // absent: no error
  util::write_file_atomic(tmp / "plain", "p");
  EXPECT_THROW(util::make_directories(tmp / "plain/sub"), mltool::ResourceError);
}

TEST(Files, RemoveStalePartialsTakesOnlyDeadWritersLeftovers) {
  TempDir tmp;
  // A pid that exited: a child reaped before we look.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  int status = 0;
  ::waitpid(dead, &status, 0);
  const std::string d = std::to_string(dead), me = std::to_string(::getpid());
  util::write_file_atomic(tmp / ("last.pt.partial-" + d + "-3"), "x");  // dead writer's temp
  util::make_directories(tmp / ("ds.partial-" + d + "/sub"));           // dead pack's directory
  util::write_file_atomic(tmp / ("mine.partial-" + me + "-0"), "x");    // ours: kept
  util::write_file_atomic(tmp / "run.json", "{}");                      // not a partial
  util::write_file_atomic(tmp / ("odd.partial-" + d + "-x"), "x");      // not our pattern
  util::write_file_atomic(tmp / "one.partial-1", "x");                  // pid 1 lives: kept
  EXPECT_EQ(util::remove_stale_partials(tmp / "", "ds."), 1u);          // the prefix limits it
  EXPECT_FALSE(util::exists(tmp / ("ds.partial-" + d)));
  EXPECT_EQ(util::remove_stale_partials(tmp / ""), 1u);
  EXPECT_FALSE(util::exists(tmp / ("last.pt.partial-" + d + "-3")));
  for (const auto* kept : {"run.json", "one.partial-1"}) EXPECT_TRUE(util::exists(tmp / kept));
  EXPECT_TRUE(util::exists(tmp / ("mine.partial-" + me + "-0")));
  EXPECT_TRUE(util::exists(tmp / ("odd.partial-" + d + "-x")));
  EXPECT_EQ(util::remove_stale_partials(tmp / "absent"), 0u);
}

TEST(AtomicFile, NothingPublishedWithoutCommit) {
  TempDir tmp;
  const auto path = tmp / "out.bin";
  {
    util::AtomicFile f(path);
    f.write("partial");
    EXPECT_TRUE(util::exists(f.temp_path()));
  }
  EXPECT_FALSE(util::exists(path));
  struct stat st {};
  EXPECT_EQ(::stat(tmp.path().c_str(), &st), 0);
}

TEST(AtomicFile, CommitReplacesAndPwritePatches) {
  TempDir tmp;
  const auto path = tmp / "out.bin";
  util::write_file_atomic(path, "old");
  util::AtomicFile f(path);
  f.write("xxxx-body");
  f.pwrite("HEAD", 4, 0);
  EXPECT_EQ(util::read_file(path), "old") << "the old file stays until commit";
  f.commit();
  EXPECT_EQ(util::read_file(path), "HEAD-body");
}

TEST(MappedFile, MapsAndNamesMissingFiles) {
  TempDir tmp;
  util::write_file_atomic(tmp / "m", "abc");
  util::MappedFile m(tmp / "m");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m.data()[1], 'b');
  try {
    util::MappedFile missing(tmp / "nope");
    FAIL();
  } catch (const mltool::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
  }
}
