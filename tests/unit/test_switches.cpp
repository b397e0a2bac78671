// The environment switches (core/switches.hpp): every value each takes, the refusal of any other,
// the listing and the JSON record, and the fault hooks the KINTSUGI_TEST_* ones turn into.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/fault_hooks.hpp"
#include "kintsugi/core/switches.hpp"

namespace kintsugi {
namespace {

using Env = std::map<std::string, std::string>;

// The message of the error a value is refused with ("" when it is taken).
std::string refusal(const std::string& name, const std::string& value) {
  try {
    Switches(Env{{name, value}});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Switches, TableIsWhole) {
  std::set<std::string_view> names;
  ASSERT_EQ(switch_specs().size(), kSwitchCount);
  for (const SwitchSpec& s : switch_specs()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_TRUE(s.name.starts_with("KINTSUGI_")) << s.name;
    EXPECT_FALSE(s.description.empty()) << s.name;
    EXPECT_FALSE(s.reference.empty()) << s.name;
    EXPECT_EQ(&spec_of(s.id), &s);
    // A default is a value the switch takes; only hooks (text, path) have none.
    const bool hook = s.kind == SwitchKind::text || s.kind == SwitchKind::path;
    EXPECT_EQ(s.default_value.empty(), hook) << s.name;
    if (!hook) {
      EXPECT_EQ(refusal(std::string(s.name), std::string(s.default_value)), "") << s.name;
    }
    // Hooks are the tests' alone, and named so.
    EXPECT_EQ(hook, s.name.starts_with("KINTSUGI_TEST_")) << s.name;
  }
}

TEST(Switches, UnsetOrEmptyTakesTheDefault) {
  const Switches unset;
  const Switches empty(Env{{"KINTSUGI_FUSED_LOSS", ""}, {"KINTSUGI_GEMM_BLOCKS", ""}});
  for (const Switches* s : {&unset, &empty}) {
    EXPECT_TRUE(s->on(Switch::fused_loss));
    EXPECT_FALSE(s->on(Switch::gemm_bgrad));
    EXPECT_FALSE(s->integer(Switch::gemm_blocks).has_value());  // auto
    EXPECT_EQ(s->integer(Switch::attn_bwd_scratch_mib), 256);
    EXPECT_EQ(s->seconds(Switch::startup_timeout_s), 600);
    EXPECT_EQ(s->text(Switch::mpi_reduce_scatter), "alltoall");
    EXPECT_EQ(s->text(Switch::test_kill_rank), "");
    EXPECT_FALSE(s->is_set(Switch::fused_loss));
  }
}

TEST(Switches, TakesItsValues) {
  const Switches s(Env{{"KINTSUGI_FUSED_LOSS", "0"},
                       {"KINTSUGI_GEMM_BGRAD", "1"},
                       {"KINTSUGI_GEMM_BLOCKS", "8"},
                       {"KINTSUGI_ATTN_BWD_MORE_BLOCKS", "dq"},
                       {"KINTSUGI_ATTN_CUDNN", "any"},
                       {"KINTSUGI_STARTUP_TIMEOUT_S", "2.5"},
                       {"KINTSUGI_TEST_KILL_RANK", "1:2"},
                       {"KINTSUGI_TEST_POWERCAP_ROOT", "/tmp/powercap"}});
  EXPECT_FALSE(s.on(Switch::fused_loss));
  EXPECT_TRUE(s.on(Switch::gemm_bgrad));
  EXPECT_EQ(s.integer(Switch::gemm_blocks), 8);
  EXPECT_EQ(s.text(Switch::attn_bwd_more_blocks), "dq");
  EXPECT_EQ(s.text(Switch::attn_cudnn), "any");
  EXPECT_EQ(s.seconds(Switch::startup_timeout_s), 2.5);
  EXPECT_EQ(s.text(Switch::test_kill_rank), "1:2");
  EXPECT_EQ(s.text(Switch::test_powercap_root), "/tmp/powercap");
  EXPECT_TRUE(s.is_set(Switch::fused_loss));
  EXPECT_FALSE(s.is_set(Switch::multi_tensor));
  EXPECT_EQ(Switches(Env{{"KINTSUGI_GEMM_BLOCKS", "0"}}).integer(Switch::gemm_blocks), 0);
  EXPECT_EQ(Switches(Env{{"KINTSUGI_STARTUP_TIMEOUT_S", "1e3"}}).seconds(
                Switch::startup_timeout_s),
            1000);
}

// What was once read loosely ("yes" as on, "2" as off...) is refused, naming the switch, the
// value and what it takes.
TEST(Switches, RefusesAnyOtherValue) {
  EXPECT_EQ(refusal("KINTSUGI_FUSED_LOSS", "yes"),
            "KINTSUGI_FUSED_LOSS=yes: not a value it takes (0 or 1)");
  EXPECT_NE(refusal("KINTSUGI_GEMM_BGRAD", "true"), "");
  EXPECT_NE(refusal("KINTSUGI_CUDA_SYNC", "2"), "");
  EXPECT_EQ(refusal("KINTSUGI_ATTN_BWD_MORE_BLOCKS", "both"),
            "KINTSUGI_ATTN_BWD_MORE_BLOCKS=both: not a value it takes (0, 1, dkdv or dq)");
  EXPECT_NE(refusal("KINTSUGI_ATTN_CUDNN", "deterministic"), "");
  EXPECT_NE(refusal("KINTSUGI_MPI_REDUCE_SCATTER", "ring"), "");
  EXPECT_NE(refusal("KINTSUGI_GEMM_BLOCKS", "-1"), "");
  EXPECT_NE(refusal("KINTSUGI_GEMM_BLOCKS", "8 "), "");
  EXPECT_NE(refusal("KINTSUGI_ATTN_BWD_SCRATCH_MIB", "1e3"), "");
  for (const char* bad : {"0", "-5", "abc", "5s", "2e9", "1e999"})
    EXPECT_NE(refusal("KINTSUGI_STARTUP_TIMEOUT_S", bad), "") << bad;
  EXPECT_EQ(refusal("KINTSUGI_TEST_KILL_RANK", "1"),
            "KINTSUGI_TEST_KILL_RANK=1: not a value it takes (the form "
            "[0-9]{1,9}:[0-9]{1,18})");
  EXPECT_NE(refusal("KINTSUGI_TEST_DIE_IN_SAVE", "a:b"), "");
  EXPECT_NE(refusal("KINTSUGI_TEST_SLOW_MICRO_BATCHES", "step:80"), "");
  EXPECT_NE(refusal("KINTSUGI_TEST_STOP_AT_START", "1:finalize"), "");
}

TEST(Switches, JsonRecordsEverySwitch) {
  const nlohmann::json j = Switches(Env{{"KINTSUGI_MULTI_TENSOR", "0"}}).to_json();
  ASSERT_EQ(j.size(), kSwitchCount);
  for (const SwitchSpec& s : switch_specs()) ASSERT_TRUE(j.contains(std::string(s.name)));
  EXPECT_EQ(j["KINTSUGI_MULTI_TENSOR"], "0");
  EXPECT_EQ(j["KINTSUGI_FUSED_LOSS"], "1");
  EXPECT_EQ(j["KINTSUGI_TEST_KILL_RANK"], "");
}

TEST(Switches, ListingNamesEverySwitch) {
  const std::string text = Switches(Env{{"KINTSUGI_ENERGY", "0"}}).describe();
  for (const SwitchSpec& s : switch_specs()) {
    EXPECT_NE(text.find(std::string(s.name) + " = "), std::string::npos) << s.name;
    EXPECT_NE(text.find(std::string(s.description)), std::string::npos) << s.name;
  }
  EXPECT_NE(text.find("KINTSUGI_ENERGY = 0 (set)  (flag, default 1, takes 0|1)"),
            std::string::npos);
  EXPECT_NE(text.find("KINTSUGI_TEST_KILL_RANK = (none)  (text, default none"),
            std::string::npos);
}

TEST(FaultHooks, FromTheTestSwitches) {
  const FaultHooks none = fault_hooks_from(Switches());
  EXPECT_FALSE(none.kill_rank || none.die_in_save || none.slow_micro_batches ||
               none.stop_at_start);
  EXPECT_EQ(none.powercap_root, "");

  const FaultHooks h = fault_hooks_from(Switches(Env{{"KINTSUGI_TEST_KILL_RANK", "1:2"},
                                                     {"KINTSUGI_TEST_DIE_IN_SAVE", "3:40"},
                                                     {"KINTSUGI_TEST_SLOW_MICRO_BATCHES",
                                                      "train:1000:3"},
                                                     {"KINTSUGI_TEST_STOP_AT_START", "1:split"},
                                                     {"KINTSUGI_TEST_POWERCAP_ROOT", "/p"}}));
  ASSERT_TRUE(h.kill_rank && h.die_in_save && h.slow_micro_batches && h.stop_at_start);
  EXPECT_EQ(h.kill_rank->rank, 1);
  EXPECT_EQ(h.kill_rank->step, 2);
  EXPECT_EQ(h.die_in_save->rank, 3);
  EXPECT_EQ(h.die_in_save->step, 40);
  EXPECT_FALSE(h.slow_micro_batches->evaluation);
  EXPECT_EQ(h.slow_micro_batches->ms, 1000);
  EXPECT_EQ(h.slow_micro_batches->from_step, 3);
  EXPECT_EQ(h.stop_at_start->rank, 1);
  EXPECT_EQ(h.stop_at_start->where, "split");
  EXPECT_EQ(h.powercap_root, "/p");

  const auto slow =
      fault_hooks_from(Switches(Env{{"KINTSUGI_TEST_SLOW_MICRO_BATCHES", "eval:500"}}))
          .slow_micro_batches;
  ASSERT_TRUE(slow);
  EXPECT_TRUE(slow->evaluation);
  EXPECT_EQ(slow->ms, 500);
  EXPECT_EQ(slow->from_step, 0);
}

}  // namespace
}  // namespace kintsugi
