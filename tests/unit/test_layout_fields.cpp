// The layout record's fields by name (core/parallel_layout_json.hpp) and the pins that read them
// (core/layout_pins.hpp): every field reads and sets by its name, every field a planner chooses
// can be pinned with no edit to the search, and the record's own search rules.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/layout_pins.hpp"
#include "kintsugi/core/parallel_layout_json.hpp"
#include "kintsugi/model/config.hpp"
#include "kintsugi/plan/search.hpp"

namespace kintsugi {
namespace {

// A layout with no field at its default.
ParallelLayout unusual() {
  return {.tp = 8,
          .pp = 2,
          .dp = 4,
          .order = "dp-tp-pp",
          .schedule = PipelineSchedule::interleaved,
          .virtual_stages = 3,
          .layers_per_stage = {5, 4},
          .zero = ZeroStage::optimizer,
          .hsdp = 2,
          .sequence_parallel = true,
          .cp = 2,
          .cp_comm = CpComm::ring,
          .tensor_grid = {2, 2, 2},
          .tensor_grid_overlap = false,
          .ep = 2};
}

TEST(LayoutFields, EveryFieldReadsAndSetsByItsName) {
  const ParallelLayout from = unusual();
  ParallelLayout to;
  const nlohmann::json j = layout_json(from);
  ASSERT_EQ(j.size(), layout_fields(false).size());
  for (const std::string& f : layout_fields(false)) {
    ASSERT_TRUE(j.contains(f)) << f;
    EXPECT_NE(field_text(from, f), field_text(ParallelLayout{}, f)) << f << ": not exercised";
    set_field(to, f, field_text(from, f));
  }
  EXPECT_EQ(to, from);
  EXPECT_EQ(field_text(from, "schedule"), "interleaved");
  EXPECT_EQ(field_text(from, "tensor_grid"), "[2,2,2]");
  EXPECT_EQ(field_text(ParallelLayout{}, "tensor_grid"), "[]");
  EXPECT_THROW(set_field(to, "tp", "two"), Error);
  EXPECT_THROW(set_field(to, "zero", "5"), Error);
  EXPECT_THROW(field_text(from, "experts"), Error);
  // What a run sets, not a planner.
  for (const std::string& f : layout_fields(true)) EXPECT_TRUE(f != "order" && f != "layers_per_stage");
}

TEST(LayoutFields, PinsListValuesAndAnyMeansAllButTheDefault) {
  LayoutPins pins;
  EXPECT_TRUE(pins.allows("tp", "3"));
  pins.pin("tp", {"2", "4"});
  EXPECT_TRUE(pins.allows("tp", "4"));
  EXPECT_FALSE(pins.allows("tp", "3"));
  pins.pin("tensor_grid", {LayoutPins::kAny});
  EXPECT_TRUE(pins.allows("tensor_grid", "[2,1,1]"));
  EXPECT_FALSE(pins.allows("tensor_grid", "[]"));
  EXPECT_FALSE(pins.lists("tensor_grid", "[2,1,1]"));
  EXPECT_THROW(pins.pin("no_such_field", {"1"}), Error);
}

// Pinning any field a planner chooses to its default value leaves only layouts with that value:
// the search applies every pin, whichever field it names.
TEST(LayoutFields, EveryChosenFieldPinsTheSearch) {
  ModelConfig m = model_preset("gpt-tiny");
  m.n_layer = 4;
  const Workload w{.model = m, .global_batch = 8};
  const std::vector<Layout> all = enumerate_layouts(w, 8, 8, {});
  for (const std::string& f : layout_fields(true)) {
    SearchSpace s;
    const std::string value = field_text(ParallelLayout{}, f);
    s.pins.pin(f, {value});
    const auto layouts = enumerate_layouts(w, 8, 8, s);
    ASSERT_FALSE(layouts.empty()) << f;
    for (const Layout& l : layouts) EXPECT_EQ(field_text(l.parallel, f), value) << f;
    // Exactly the unpinned search's layouts with that value.
    const auto kept = std::count_if(all.begin(), all.end(), [&](const Layout& l) {
      return field_text(l.parallel, f) == value;
    });
    EXPECT_EQ(static_cast<std::ptrdiff_t>(layouts.size()), kept) << f;
  }
}

TEST(LayoutFields, TensorSplitsTryTheOneByNByOneGridOnlyWhenNamed) {
  auto grids = [](const LayoutPins& pins) {
    std::vector<std::string> out;
    for (const TensorSplit& s : tensor_splits(4, pins)) out.push_back(field_text(s.layout, "tensor_grid"));
    return out;
  };
  const auto unpinned = grids({});
  EXPECT_EQ(unpinned.front(), "[]");
  EXPECT_EQ(std::count(unpinned.begin(), unpinned.end(), "[1,4,1]"), 0);
  LayoutPins named;
  named.pin("tensor_grid", {"[1,4,1]"});
  EXPECT_EQ(grids(named), std::vector<std::string>{"[1,4,1]"});
  EXPECT_TRUE(tensor_splits(4, named).front().named);
}

TEST(LayoutFields, RefinementsVaryTheOverlapOnlyWherePinned) {
  const ParallelLayout grid{.tp = 4, .dp = 2, .tensor_grid = {2, 1, 2}};
  for (const ParallelLayout& l : refinements(grid, {})) EXPECT_TRUE(l.tensor_grid_overlap);
  LayoutPins pins;
  pins.pin("tensor_grid_overlap", {"false"});
  const auto off = refinements(grid, pins);
  ASSERT_FALSE(off.empty());
  for (const ParallelLayout& l : off) EXPECT_FALSE(l.tensor_grid_overlap);
  // A 1D layout has no overlap to pin: its refinements stay.
  EXPECT_FALSE(refinements({.tp = 4, .dp = 2}, pins).empty());
}

TEST(LayoutFields, SameSplitIgnoresWhatPlacesStateOrTimesCollectives) {
  ParallelLayout a = unusual(), b = unusual();
  b.zero = ZeroStage::parameters;
  b.hsdp = 0;
  b.order = "tp-dp-pp";
  b.layers_per_stage.clear();
  b.tensor_grid_overlap = true;
  EXPECT_TRUE(same_split(a, b));
  b.virtual_stages = 1;
  EXPECT_FALSE(same_split(a, b));
  // A planner's layout over a run's: the run keeps its order and stage sizes.
  const ParallelLayout planned = ParallelLayout{.tp = 2, .pp = 2, .dp = 2}.planned_over(a);
  EXPECT_EQ(planned.order, a.order);
  EXPECT_EQ(planned.layers_per_stage, a.layers_per_stage);
  EXPECT_EQ(planned.tensor_grid_overlap, a.tensor_grid_overlap);
  EXPECT_TRUE(ParallelLayout{.pp = 3}.planned_over(a).layers_per_stage.empty());
}

}  // namespace
}  // namespace kintsugi
