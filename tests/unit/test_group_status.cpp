// The arithmetic of the stall diagnosis (comm/mpi/group_status.hpp): who has arrived at an
// operation that timed out, from the counts every rank reports. No MPI needed.
#include <gtest/gtest.h>

#include "kintsugi/comm/mpi/group_status.hpp"

namespace kintsugi {
namespace {

OpLabel op(const char* name, int peer = -1, bool sending = false, Plane plane = Plane::data) {
  OpLabel l;
  l.plane = plane;
  l.op = name;
  l.peer = peer;
  l.sending = sending;
  return l;
}

TEST(GroupStatus, CollectivesArriveByCountPerPlane) {
  GroupStatus waiting("tp", {2, 3}, 0), peer("tp", {2, 3}, 1);
  for (int i = 0; i < 3; ++i) {
    OpLabel a = op("all_reduce");
    waiting.posted(a);
  }
  OpLabel stuck = op("all_reduce");
  waiting.posted(stuck);
  EXPECT_EQ(stuck.seq, 4u);
  for (int i = 0; i < 3; ++i) {
    OpLabel a = op("all_reduce");
    peer.posted(a);
  }
  EXPECT_FALSE(has_arrived(peer.to_json(), stuck, 0));  // the peer stopped after its third
  OpLabel control = op("barrier", -1, false, Plane::control);
  peer.posted(control);
  EXPECT_FALSE(has_arrived(peer.to_json(), stuck, 0)) << "control-plane ops count apart";
  OpLabel fourth = op("all_reduce");
  peer.posted(fourth);
  EXPECT_TRUE(has_arrived(peer.to_json(), stuck, 0));
}

TEST(GroupStatus, TransfersPairPerPeerAndDirection) {
  GroupStatus a("pp", {0, 1}, 0), b("pp", {0, 1}, 1);
  OpLabel recv1 = op("recv", 1), recv2 = op("recv", 1);
  a.posted(recv1);
  a.posted(recv2);
  EXPECT_EQ(recv2.seq, 2u);
  OpLabel send1 = op("send", 0, true);
  b.posted(send1);
  EXPECT_TRUE(has_arrived(b.to_json(), recv1, 0));
  EXPECT_FALSE(has_arrived(b.to_json(), recv2, 0));
  OpLabel back = op("recv", 0);  // b receiving from a does not count as a send to a
  b.posted(back);
  EXPECT_FALSE(has_arrived(b.to_json(), recv2, 0));
  // a's send waits for b's matching receive
  OpLabel send_to_b = op("send", 1, true);
  a.posted(send_to_b);
  EXPECT_TRUE(has_arrived(b.to_json(), send_to_b, 0));
}

TEST(GroupStatus, ReportsTheOldestOpenOperation) {
  GroupStatus g("dp", {0, 4}, 0);
  EXPECT_TRUE(g.to_json().at("waiting").is_null());
  OpLabel first = op("all_reduce"), second = op("all_gather");
  first.bytes = 4096;
  const auto t1 = g.posted(first);
  const auto t2 = g.posted(second);
  const std::string waiting = g.to_json().at("waiting").get<std::string>();
  EXPECT_NE(waiting.find("all_reduce #1 (4096 bytes) in group dp"), std::string::npos) << waiting;
  g.finished(t1);
  // Collectives of all kinds share one count: every member issues the same sequence.
  EXPECT_NE(g.to_json().at("waiting").get<std::string>().find("all_gather #2"), std::string::npos);
  g.finished(t2);
  EXPECT_TRUE(g.to_json().at("waiting").is_null());
}

}  // namespace
}  // namespace kintsugi
