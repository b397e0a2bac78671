// Rank arithmetic of 3D layouts (no communication).
#include <gtest/gtest.h>

#include <set>

#include "kintsugi/comm/topology.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi {
namespace {

TEST(LayoutMap, TensorParallelIsFastestAndPipelineOutermost) {
  const LayoutMap map(16, {.tp = 2, .pp = 2, .dp = 4});
  // rank = tp + 2 * (dp + 4 * pp)
  EXPECT_EQ(map.coords(0).tp, 0);
  EXPECT_EQ(map.coords(1).tp, 1);
  EXPECT_EQ(map.coords(2).dp, 1);
  EXPECT_EQ(map.coords(8).pp, 1);
  EXPECT_EQ(map.group(5, Dim::tp), (std::vector<int>{4, 5}));
  EXPECT_EQ(map.group(5, Dim::dp), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(map.group(5, Dim::pp), (std::vector<int>{5, 13}));
  for (int r = 0; r < 16; ++r) EXPECT_EQ(map.rank(map.coords(r)), r);
}

TEST(LayoutMap, GroupsPartitionTheWorld) {
  const LayoutMap map(24, {.tp = 2, .pp = 4, .dp = 3, .order = "tp-pp-dp"});
  for (Dim d : {Dim::tp, Dim::dp, Dim::pp}) {
    std::set<int> seen;
    for (const auto& g : map.groups(d)) {
      EXPECT_EQ(static_cast<int>(g.size()), map.size(d));
      for (int r : g) EXPECT_TRUE(seen.insert(r).second) << r;
    }
    EXPECT_EQ(seen.size(), 24u);
  }
  EXPECT_EQ(map.coords(2).pp, 1);  // order tp-pp-dp: pp varies second
}

TEST(LayoutMap, ContextParallelRanksFollowTensorParallelOnes) {
  // An order without cp places it right after tp: rank = tp + 2 (cp + 2 (dp + 2 pp)).
  const LayoutMap map(16, {.tp = 2, .pp = 2, .dp = 2, .cp = 2});
  EXPECT_EQ(map.coords(2).cp, 1);
  EXPECT_EQ(map.coords(4).dp, 1);
  EXPECT_EQ(map.coords(8).pp, 1);
  EXPECT_EQ(map.group(5, Dim::cp), (std::vector<int>{5, 7}));
  EXPECT_EQ(map.group(5, Dim::dp), (std::vector<int>{1, 5}));
  for (Dim d : {Dim::tp, Dim::dp, Dim::pp, Dim::cp}) {
    std::set<int> seen;
    for (const auto& g : map.groups(d)) {
      EXPECT_EQ(static_cast<int>(g.size()), map.size(d));
      for (int r : g) EXPECT_TRUE(seen.insert(r).second) << r;
    }
    EXPECT_EQ(seen.size(), 16u);
  }
  for (int r = 0; r < 16; ++r) EXPECT_EQ(map.rank(map.coords(r)), r);
  // Named, it goes where the order says.
  const LayoutMap outer(8, {.tp = 2, .dp = 2, .order = "tp-dp-pp-cp", .cp = 2});
  EXPECT_EQ(outer.group(0, Dim::cp), (std::vector<int>{0, 4}));
}

TEST(LayoutMap, ClearErrors) {
  try {
    LayoutMap(8, {.tp = 2, .pp = 1, .dp = 3});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("set --dp 4"), std::string::npos) << e.what();
  }
  EXPECT_THROW(LayoutMap(4, {.tp = 2, .pp = 1, .dp = 2, .order = "tp-tp-pp"}), Error);
  EXPECT_THROW(LayoutMap(4, {.tp = 2, .pp = 1, .dp = 2, .order = "tp-xp-pp"}), Error);
}

}  // namespace
}  // namespace kintsugi
