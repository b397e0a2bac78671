// The deadlock check under mpirun, on 4 ranks with the default comm.timeout_s (600 s) and
// comm.deadlock_check_s (2 s). Groups: the world, and pairs {0, 1} and {2, 3}.
//
//   deadlock_test mismatched   Ranks 0, 2 and 3 all-reduce host values over the world while
//                              rank 1 first all-reduces a tensor in its pair, which rank 0
//                              never joins: a certain deadlock, which must end the job within
//                              seconds (the caller times it).
//   deadlock_test busy         Rank 3 computes (sleeps) 6 s before it joins the world's
//                              all-reduce, rank 1 waits meanwhile for a transfer from rank 2,
//                              which rank 2 sends after an all-reduce in its pair with rank 3:
//                              every other rank waits, in different operations, for longer
//                              than the check's delay, yet the job must finish (exit 0).
#include <fmt/format.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/mpi/mpi_runtime.hpp"

using namespace kintsugi;

namespace {

Tensor view(std::vector<float>& v) {
  return Tensor{v.data(), DType::f32, Shape{static_cast<std::int64_t>(v.size())}};
}

void mismatched(Communicator& world, Communicator& pair) {
  std::vector<float> x(16, 1.0f);
  if (world.rank() == 1) pair.all_reduce(view(x));  // rank 0 is not there: it never will be
  world.host_all_reduce(1.0);
  if (world.rank() != 1) pair.all_reduce(view(x));
}

void busy(Communicator& world, Communicator& pair) {
  const int r = world.rank();
  std::vector<float> x(16, 1.0f);
  if (r == 3) std::this_thread::sleep_for(std::chrono::seconds(6));
  if (r >= 2) pair.all_reduce(view(x));  // rank 2 waits here for rank 3
  if (r == 2) world.send_async(view(x), 1).wait();
  if (r == 1) world.recv_async(view(x), 2).wait();  // waits for rank 2, which waits for rank 3
  world.host_all_reduce(1.0);                        // rank 0 waits here for everyone
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  const std::string mode = argc > 1 ? argv[1] : "";
  {
    auto world = make_world_communicator();
    if (world->size() != 4 || (mode != "mismatched" && mode != "busy")) {
      if (world->rank() == 0)
        fmt::print(stderr, "usage: mpirun -np 4 deadlock_test mismatched|busy\n");
      return 2;
    }
    auto pair = world->split(world->rank() / 2, world->rank(), "pair");
    if (mode == "mismatched") mismatched(*world, *pair);
    else busy(*world, *pair);
    world->barrier();
    if (world->rank() == 0) fmt::print("{}: every rank finished\n", mode);
  }
  return 0;
}
