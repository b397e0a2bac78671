// The deadlock check's verdict from two rounds of rank statuses (comm/mpi/deadlock.hpp): a
// deadlock only when every rank is blocked, the same in both rounds, on an operation whose other
// sides are missing; never for a receive whose send is posted, a collective every member has
// posted, a send, a rank that computes, a rank that does not answer, or a rank that moved.
#include <gtest/gtest.h>

#include <array>

#include "kintsugi/comm/mpi/deadlock.hpp"

namespace kintsugi {
namespace {

using nlohmann::json;

// One group's status as GroupStatus::to_json writes it: collectives per plane [data, control],
// transfers [plane][peer].
json group(const std::string& name, std::vector<int> ranks, std::array<int, 2> collectives,
           json sent = nullptr, json received = nullptr) {
  const std::size_t n = ranks.size();
  const json zeros = {std::vector<int>(n, 0), std::vector<int>(n, 0)};
  return {{"name", name},
          {"ranks", ranks},
          {"collectives", collectives},
          {"sent", sent.is_null() ? zeros : sent},
          {"received", received.is_null() ? zeros : received},
          {"finished", 0},
          {"waiting", "something for 3.0 s"}};
}

// What a rank waits for (group_status.hpp's to_json(label, ...)).
json waits(const std::string& group, std::vector<int> ranks, int rank, int plane, int seq,
           int peer = -1, bool sending = false) {
  return {{"group", group}, {"ranks", ranks},   {"rank", rank},
          {"plane", plane}, {"seq", seq},       {"peer", peer},
          {"sending", sending},
          {"describe", (plane == 1 ? std::string("control-plane host_all_reduce #")
                                   : std::string(peer < 0 ? "all_reduce #"
                                                          : sending ? "send #" : "recv #")) +
                           std::to_string(seq)}};
}

json status(std::vector<json> groups, json blocked, int waits_begun = 7) {
  return {{"reported", false}, {"groups", groups}, {"blocked", blocked}, {"waits", waits_begun}};
}

const std::vector<int> kWorld = {0, 1, 2, 3};

// Ranks 0, 2, 3 wait in the world's 9th control-plane collective; rank 1 never gets there: it
// waits in its dp group's 4th data-plane all-reduce, which rank 0 has not posted (3 of them).
std::vector<json> mismatched() {
  return {
      status({group("world", kWorld, {0, 9}), group("dp", {0, 1}, {3, 0})},
             waits("world", kWorld, 0, 1, 9)),
      status({group("world", kWorld, {0, 8}), group("dp", {0, 1}, {4, 0})},
             waits("dp", {0, 1}, 1, 0, 4)),
      status({group("world", kWorld, {0, 9}), group("dp", {2, 3}, {4, 0})},
             waits("world", kWorld, 2, 1, 9)),
      status({group("world", kWorld, {0, 9}), group("dp", {2, 3}, {4, 0})},
             waits("world", kWorld, 3, 1, 9)),
  };
}

TEST(Deadlock, MismatchedCollectivesAreOne) {
  const auto s = mismatched();
  ASSERT_TRUE(every_rank_blocked(s));
  const std::string report = certain_deadlock(s, s);
  EXPECT_NE(report.find("world ranks 0, 2, 3 wait for control-plane host_all_reduce #9 in group "
                        "world (world ranks 0-3), which world rank 1 has not reached"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("world rank 1 waits for all_reduce #4 in group dp (world ranks 0, 1), "
                        "which world rank 0 has not reached"),
            std::string::npos)
      << report;
}

TEST(Deadlock, HowLongOperationsWaitedDoesNotCount) {
  auto first = mismatched(), second = mismatched();
  for (json& s : second) {
    s["reported"] = false;
    s["probe"] = 12;
    for (json& g : s["groups"]) g["waiting"] = "something for 5.0 s";
  }
  EXPECT_FALSE(certain_deadlock(first, second).empty());
}

TEST(Deadlock, NoneIfARankMovedBetweenTheRounds) {
  auto second = mismatched();
  second[1]["waits"] = 8;  // it stopped waiting and waited again: it may have posted
  EXPECT_EQ(certain_deadlock(mismatched(), second), "");
  second = mismatched();
  second[2]["groups"][1]["finished"] = 1;  // an operation completed
  EXPECT_EQ(certain_deadlock(mismatched(), second), "");
}

TEST(Deadlock, NoneIfARankComputesOrDoesNotAnswer) {
  auto s = mismatched();
  s[3]["blocked"] = nullptr;  // busy outside communication: it can still post
  EXPECT_FALSE(every_rank_blocked(s));
  EXPECT_EQ(certain_deadlock(s, s), "");
  s = mismatched();
  s[2] = nullptr;  // stopped, hung or dead: for comm.timeout_s
  EXPECT_FALSE(every_rank_blocked(s));
  EXPECT_EQ(certain_deadlock(s, s), "");
}

TEST(Deadlock, NoneIfACollectiveHasEveryMember) {
  auto s = mismatched();
  s[0]["groups"][1]["collectives"][0] = 4;  // rank 0 has posted dp's 4th all-reduce after all
  EXPECT_EQ(certain_deadlock(s, s), "");
}

// A pipeline: rank 1 (stage 1) waits for an activation from rank 0 (stage 0) in group pp; rank
// 0 waits in the world's collective, which rank 1 has not reached. If rank 0 has posted the
// send, rank 1's receive completes and rank 1 goes on to the collective: no deadlock.
std::vector<json> pipeline(int sends_posted) {
  const json sent0 = {{0, 0}, {0, 0}};
  json sent = {{0, sends_posted}, {0, 0}};  // [plane][peer]: rank 0's data-plane sends to 1
  return {
      status({group("world", {0, 1}, {0, 5}), group("pp", {0, 1}, {0, 0}, sent)},
             waits("world", {0, 1}, 0, 1, 5)),
      status({group("world", {0, 1}, {0, 4}), group("pp", {0, 1}, {0, 0}, sent0)},
             waits("pp", {0, 1}, 1, 0, 3, /*peer=*/0)),
  };
}

TEST(Deadlock, NoneIfAReceiveHasItsSend) {
  EXPECT_EQ(certain_deadlock(pipeline(3), pipeline(3)), "");
  const std::string report = certain_deadlock(pipeline(2), pipeline(2));
  EXPECT_NE(report.find("world rank 1 waits for recv #3 in group pp (world ranks 0, 1), which "
                        "world rank 0 has not reached"),
            std::string::npos)
      << report;
}

TEST(Deadlock, NoneIfARankWaitsOnASend) {
  // MPI may complete a send before its receive is posted (buffering it).
  auto s = pipeline(2);
  s[1]["blocked"] = waits("pp", {0, 1}, 1, 0, 3, /*peer=*/0, /*sending=*/true);
  EXPECT_EQ(certain_deadlock(s, s), "");
}

TEST(Deadlock, AMemberWithoutTheGroupHasNotArrived) {
  auto s = mismatched();
  s[0]["groups"].erase(1);  // rank 0 has no dp group any more: it can never post there
  EXPECT_NE(certain_deadlock(s, s).find("which world rank 0 has not reached"), std::string::npos);
}

TEST(Deadlock, RankLists) {
  EXPECT_EQ(rank_list({5, 0, 1, 2, 3, 7, 8}), "0-3, 5, 7, 8");
  EXPECT_EQ(rank_list({4}), "4");
  EXPECT_EQ(rank_list({}), "");
}

}  // namespace
}  // namespace kintsugi
