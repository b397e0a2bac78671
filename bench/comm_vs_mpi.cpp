// kintsugi's communicator beside the MPI library called directly, in one run (docs/benchmarks.md,
// "Collectives: the communicator vs the library called directly"). For each collective and size
// every way is timed in the same rounds, interleaved, so machine noise falls on all of them:
//   kintsugi    the communicator's blocking call (what training pays: progress thread, staging)
//   MPI_I*      the library's non-blocking collective, then MPI_Wait on the calling thread
//   MPI_*       the library's blocking collective
// and, for reduce-scatter, the ways the library can build it from other collectives. Every way
// reduces the same f32 buffer in place, warmed up once; a time is the slowest rank's median.
//
// Usage: mpirun -np 2 kintsugi_comm_bench [--sizes-mib 1,4,16,64] [--repeats N] [--json]
#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/comm/mpi/mpi_runtime.hpp"

using namespace kintsugi;

namespace {

struct Way {
  std::string op, name;
  std::function<void()> run;
  std::vector<double> times;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<long> parse_list(const char* text) {
  std::vector<long> out;
  for (const char* p = text; *p;) {
    out.push_back(std::strtol(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> sizes_mib = {1, 4, 16, 64};
  int repeats = 11;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--sizes-mib") && i + 1 < argc) sizes_mib = parse_list(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else {
      std::fprintf(stderr, "usage: mpirun -np N %s [--sizes-mib 1,4,16,64] [--repeats N] [--json]\n",
                   argv[0]);
      return 2;
    }
  }
  MpiRuntime mpi(&argc, &argv);
  auto world = make_world_communicator();
  const int n = world->size(), me = world->rank();
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (me == 0 && !json)
    fmt::print("{} ranks, f32, in place; slowest rank's median of {} rounds, ways interleaved\n\n"
               "{:<15} {:>9} {:<34} {:>11} {:>9} {:>8}\n",
               n, repeats, "collective", "MiB", "way", "median us", "bus GB/s", "vs best");
  for (long mib : sizes_mib) {
    const std::int64_t elements = mib * 1024 * 1024 / 4 / n * n;
    const int chunk = static_cast<int>(elements / n);
    std::vector<float> buf(static_cast<std::size_t>(elements)), out(buf.size());
    const Tensor whole{buf.data(), DType::f32, Shape{elements}};
    const Tensor part{buf.data(), DType::f32, Shape{chunk}};
    const Tensor gathered{out.data(), DType::f32, Shape{elements}};
    const int count = static_cast<int>(elements);
    auto wait = [](MPI_Request r) { MPI_Wait(&r, MPI_STATUS_IGNORE); };
    std::vector<Way> ways;
    // All-reduce.
    ways.push_back({"all_reduce", "kintsugi", [&] { world->all_reduce(whole); }, {}});
    ways.push_back({"all_reduce", "MPI_Iallreduce + MPI_Wait", [&] {
      MPI_Request r;
      MPI_Iallreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, comm, &r);
      wait(r);
    }, {}});
    ways.push_back({"all_reduce", "MPI_Allreduce", [&] {
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, comm);
    }, {}});
    // Reduce-scatter, and the ways to build it from the library's other collectives.
    ways.push_back({"reduce_scatter", "kintsugi", [&] { world->reduce_scatter(whole, part); }, {}});
    ways.push_back({"reduce_scatter", "MPI_Ireduce_scatter_block + Wait", [&] {
      MPI_Request r;
      MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf.data(), chunk, MPI_FLOAT, MPI_SUM, comm, &r);
      wait(r);
    }, {}});
    ways.push_back({"reduce_scatter", "MPI_Reduce_scatter_block", [&] {
      MPI_Reduce_scatter_block(MPI_IN_PLACE, buf.data(), chunk, MPI_FLOAT, MPI_SUM, comm);
    }, {}});
    ways.push_back({"reduce_scatter", "MPI_Ireduce_scatter_block apart", [&] {
      MPI_Request r;
      MPI_Ireduce_scatter_block(buf.data(), out.data(), chunk, MPI_FLOAT, MPI_SUM, comm, &r);
      wait(r);
    }, {}});
    ways.push_back({"reduce_scatter", "MPI_Reduce_scatter_block apart", [&] {
      MPI_Reduce_scatter_block(buf.data(), out.data(), chunk, MPI_FLOAT, MPI_SUM, comm);
    }, {}});
    std::vector<float> scratch(buf.size());
    ways.push_back({"reduce_scatter", "MPI_Ialltoallv + sum (by hand)", [&] {
      std::vector<int> counts(static_cast<std::size_t>(n), chunk), displs(static_cast<std::size_t>(n));
      counts[static_cast<std::size_t>(me)] = 0;
      for (int r = 0; r < n; ++r) displs[static_cast<std::size_t>(r)] = r * chunk;
      MPI_Request q;
      MPI_Ialltoallv(buf.data(), counts.data(), displs.data(), MPI_FLOAT, scratch.data(),
                     counts.data(), displs.data(), MPI_FLOAT, comm, &q);
      wait(q);
      float* acc = buf.data() + static_cast<std::size_t>(me) * chunk;
      for (int r = 0; r < n; ++r) {
        if (r == me) continue;
        const float* p = scratch.data() + static_cast<std::size_t>(r) * chunk;
        for (int i = 0; i < chunk; ++i) acc[i] += p[i];
      }
    }, {}});
    ways.push_back({"reduce_scatter", "n x MPI_Ireduce (root = owner)", [&] {
      std::vector<MPI_Request> r(static_cast<std::size_t>(n));
      for (int root = 0; root < n; ++root) {
        float* p = buf.data() + static_cast<std::size_t>(root) * chunk;
        MPI_Ireduce(root == me ? MPI_IN_PLACE : p, root == me ? p : nullptr, chunk, MPI_FLOAT,
                    MPI_SUM, root, comm, &r[static_cast<std::size_t>(root)]);
      }
      MPI_Waitall(n, r.data(), MPI_STATUSES_IGNORE);
    }, {}});
    // All-gather.
    ways.push_back({"all_gather", "kintsugi", [&] { world->all_gather(part, gathered); }, {}});
    ways.push_back({"all_gather", "MPI_Iallgather + MPI_Wait", [&] {
      MPI_Request r;
      MPI_Iallgather(buf.data(), chunk, MPI_FLOAT, out.data(), chunk, MPI_FLOAT, comm, &r);
      wait(r);
    }, {}});
    ways.push_back({"all_gather", "MPI_Allgather", [&] {
      MPI_Allgather(buf.data(), chunk, MPI_FLOAT, out.data(), chunk, MPI_FLOAT, comm);
    }, {}});
    for (Way& w : ways) w.run();  // warm-up: connections, pages, buffers
    for (int round = 0; round < repeats; ++round)
      for (Way& w : ways) {
        std::fill(buf.begin(), buf.end(), 1.0f);  // the same values each time (no overflow)
        MPI_Barrier(comm);
        const double start = now_s();
        w.run();
        w.times.push_back(now_s() - start);
      }
    std::vector<double> medians;
    for (Way& w : ways) {
      std::sort(w.times.begin(), w.times.end());
      double m = w.times[w.times.size() / 2];
      MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, comm);
      medians.push_back(m);
    }
    if (me != 0) continue;
    for (std::size_t i = 0; i < ways.size(); ++i) {
      double best = 1e30;
      for (std::size_t j = 0; j < ways.size(); ++j)
        if (ways[j].op == ways[i].op && ways[j].name != "kintsugi") best = std::min(best, medians[j]);
      const double b = static_cast<double>(elements) * 4;
      const double factor = ways[i].op == "all_reduce" ? 2.0 * (n - 1) / n : double(n - 1) / n;
      if (json)
        fmt::print("{{\"op\": \"{}\", \"mib\": {}, \"way\": \"{}\", \"median_us\": {:.1f}, "
                   "\"bus_gbs\": {:.3f}, \"vs_best_library\": {:.3f}}}\n",
                   ways[i].op, mib, ways[i].name, medians[i] * 1e6, b * factor / medians[i] / 1e9,
                   medians[i] / best);
      else
        fmt::print("{:<15} {:>9} {:<34} {:>11.0f} {:>9.2f} {:>7.2f}x\n", ways[i].op, mib,
                   ways[i].name, medians[i] * 1e6, b * factor / medians[i] / 1e9,
                   medians[i] / best);
    }
  }
  MPI_Comm_free(&comm);
  world.reset();
  return 0;
}
