// Stop signals and the output directory's lock (docs/checkpoints.md): SIGTERM (and SIGUSR1/2)
// only ever asks to stop, however often it comes; a second SIGINT ends the process at once with
// a message; a second run cannot take an output directory another holds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <csignal>
#include <fstream>

#include "kintsugi/core/error.hpp"
#include "kintsugi/train/output_lock.hpp"
#include "kintsugi/train/preemption.hpp"
#include "kintsugi/train/previous_run.hpp"
#include "support/error_of.hpp"
#include "scratch_dir.hpp"
#include "support/error_of.hpp"

namespace kintsugi {
namespace {

namespace fs = std::filesystem;

using testing::error_of;

// A scheduler may repeat SIGTERM while the checkpoint is being written: the process lives on.
// In a child process, as every test here that raises a signal: the flag it sets stays set, and
// the training tests that run after it in the same process would stop at their first step.
TEST(PreemptionDeathTest, RepeatedSigtermOnlyAsksToStop) {
  EXPECT_EXIT(
      {
        install_stop_handlers();
        if (stop_requested()) std::_Exit(3);
        for (int k = 0; k < 3; ++k) std::raise(SIGTERM);
        if (!stop_requested()) std::_Exit(4);
        std::raise(SIGINT);  // a first interrupt after them is still a request
        std::_Exit(stop_requested() ? 0 : 5);
      },
      ::testing::ExitedWithCode(0), "");
}

// SIGUSR1 and SIGUSR2 are what mpirun passes on to the ranks at once (docs/checkpoints.md): each
// asks to stop, repeated ones included, and none ends the process (their default action would).
TEST(PreemptionDeathTest, SigusrAsksToStop) {
  for (int signal : {SIGUSR1, SIGUSR2})
    EXPECT_EXIT(
        {
          install_stop_handlers();
          if (stop_requested()) std::_Exit(3);
          for (int k = 0; k < 3; ++k) std::raise(signal);
          std::_Exit(stop_requested() ? 0 : 4);
        },
        ::testing::ExitedWithCode(0), "")
        << "signal " << signal;
}

TEST(PreemptionDeathTest, SecondSigintEndsAtOnceWithAMessage) {
  EXPECT_EXIT(
      {
        install_stop_handlers();
        std::raise(SIGINT);
        if (!stop_requested()) std::_Exit(3);
        std::raise(SIGINT);
        std::_Exit(4);  // not reached
      },
      ::testing::ExitedWithCode(128 + SIGINT), "second interrupt: stopping now");
}

TEST(OutputLock, SecondHolderIsRefusedByName) {
  const ScratchDir scratch("output-lock");
  const fs::path out = scratch / "run";
  {
    const OutputLock first(out);  // creates the directory
    EXPECT_TRUE(fs::is_directory(out));
    const std::string error = error_of([&] { OutputLock second(out); });
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    EXPECT_NE(error.find(fmt::format("--out {} is in use by another training run (host {} pid {})",
                                     out.string(), host, getpid())),
              std::string::npos)
        << error;
  }
  const OutputLock again(out);  // released with its holder
}

TEST(OutputLock, OutMustBeADirectoryThatCanBeMade) {
  const ScratchDir scratch("output-lock-file");
  std::ofstream(scratch / "file") << "x";
  EXPECT_NE(error_of([&] { OutputLock lock(scratch / "file"); }).find("is a file, not a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { OutputLock lock(scratch / "file" / "run"); }).find("cannot be created"),
            std::string::npos);
}

// --metrics outside --out is locked with it: a second run naming the file is refused (its
// --overwrite would empty it), and the refused run leaves no lock of its own behind.
TEST(OutputLock, MetricsFileIsLockedWhereverItIs) {
  const ScratchDir scratch("output-lock-metrics");
  const fs::path metrics = scratch / "elsewhere" / "metrics.jsonl";
  {
    const OutputLock first(scratch / "a", metrics);
    EXPECT_TRUE(fs::is_regular_file(metrics));  // created, empty: no earlier run's lines
    const std::string error = error_of([&] { OutputLock second(scratch / "b", metrics); });
    EXPECT_NE(error.find(fmt::format("--metrics {} is in use by another training run",
                                     metrics.string())),
              std::string::npos)
        << error;
    const OutputLock other(scratch / "b");  // the refused one released --out b
  }
  const OutputLock again(scratch / "b", metrics);  // released with its holder
  EXPECT_NE(error_of([&] { OutputLock lock(scratch / "c", scratch / "a"); }).find("is a directory"),
            std::string::npos);
  const OutputLock pipe_like(scratch / "d", "/dev/null");  // not a file a run empties: not locked
  const OutputLock pipe_again(scratch / "e", "/dev/null");
}

// --overwrite empties the metrics file instead of removing it: the run's lock is on that file.
TEST(OutputLock, OverwriteKeepsTheLockedMetricsFile) {
  const ScratchDir scratch("output-lock-overwrite");
  const fs::path out = scratch / "run", metrics = scratch / "metrics.jsonl";
  std::ofstream(metrics) << "{\"step\": 1}\n";
  const OutputLock lock(out, metrics);
  remove_previous_run(out, metrics);
  EXPECT_TRUE(fs::is_regular_file(metrics));
  EXPECT_EQ(fs::file_size(metrics), 0u);
  EXPECT_NE(error_of([&] { OutputLock second(scratch / "other", metrics); }).find("in use"),
            std::string::npos);
}

}  // namespace
}  // namespace kintsugi
