#pragma once
// Whether a job is certainly deadlocked, from two rounds of every rank's status (stall_watch.hpp).
//
// A rank is blocked when its one communicating thread waits for one operation (a control-plane
// call, or a data-plane handle's wait()). The job is deadlocked when, at one moment, every rank
// is blocked and no rank's operation can complete: then no rank will ever post anything again,
// so none ever will. An operation can complete when its peers have posted their side:
// - a collective of a group, when every member has posted that collective of that plane (the
//   k-th collective of a group and plane pairs with every member's k-th);
// - a receive, when the peer has posted the matching send (the k-th send from a to b pairs with
//   b's k-th receive from a);
// - a send, always as far as we can tell: MPI may buffer a send and complete it before the
//   receiver posts the receive, so a rank waiting on a send is never counted as stuck.
// Ranks legitimately in different operations are not deadlocked: a pipeline receive waits for a
// send that a stage posts once its own all-reduce of another group completes, and that
// all-reduce can complete; a rank computing (not blocked) can still post; a rank that does not
// answer (stopped, hung, dead) is unknown, and comm.timeout_s handles it.
//
// The "one moment" is made sure by two rounds: each rank's status counts every event (posts,
// completions, waits begun), so a rank whose status is the same in both rounds did nothing in
// between, and the moment between the rounds (after every first answer, before every second
// query) saw exactly those states.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace kintsugi {

// Whether every status (one per world rank; null where a rank did not answer) says its rank is
// blocked: the cheap test before a second round.
bool every_rank_blocked(const std::vector<nlohmann::json>& statuses);

// The report of a certain deadlock (what every rank waits for and who has not reached it), or ""
// when the two rounds do not prove one.
std::string certain_deadlock(const std::vector<nlohmann::json>& first,
                             const std::vector<nlohmann::json>& second);

// "0-3, 5, 7-8": world ranks, ascending runs joined.
std::string rank_list(std::vector<int> ranks);

}  // namespace kintsugi
