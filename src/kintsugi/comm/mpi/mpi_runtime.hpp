#pragma once
// The process's MPI session. Ranks are MPI processes started by the cluster's own launcher
// (`mpirun`, `srun`); a program started without one runs as a world of one (MPI singleton).
// Each group's communication thread calls MPI concurrently with the others', hence
// MPI_THREAD_MULTIPLE.
namespace kintsugi {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
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
