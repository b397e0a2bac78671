#pragma once
// The process's MPI session. Ranks are MPI processes started by the cluster's own launcher
// (`mpirun`, `srun`); a program started without one runs as a world of one (MPI singleton).
// Each group's communication thread calls MPI concurrently with the others', hence
// MPI_THREAD_MULTIPLE.
#include <optional>

#include "kintsugi/core/fault_hooks.hpp"

namespace kintsugi {

class MpiRuntime {
 public:
  // `stop_at_start`: a fault hook for the startup tests (startup_deadline.hpp); none by default.
  MpiRuntime(int* argc, char*** argv, const std::optional<StopAtStart>& stop_at_start = {});
  ~MpiRuntime();  // MPI_Finalize
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  // Ranks of this job on this node (they share its cores).
  int local_size() const { return local_size_; }
  int local_rank() const { return local_rank_; }

  static bool initialized();

 private:
  int rank_ = 0, size_ = 1, local_size_ = 1, local_rank_ = 0;
};

}  // namespace kintsugi
