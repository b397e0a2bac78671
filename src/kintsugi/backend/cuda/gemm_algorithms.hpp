#pragma once
// The cuBLASLt algorithm chosen for each GEMM shape by timing (gemm.hpp), kept between runs in
// gemm-algorithms.json in the cache directory (core/cache_dir.hpp), so that every later process
// on the same GPU model with the same cuBLASLt runs the same algorithm and so computes the same
// bits (docs/gpu.md, "GEMM algorithms"). cuBLASLt's algorithm descriptor is 64 bytes that its
// header says may be stored and restored for use with the same library version; entries are
// keyed by the GPU (model name and multiprocessor count), the cuBLASLt version and the shape.
//
// The first choice stored for a shape wins: a process that tuned the same shape meanwhile
// adopts the stored algorithm instead of its own (the file is read and written under a lock).
// The process also remembers every choice it made or read, so that its GEMMs agree even where
// the cache directory cannot be written. Remove the file to tune again.
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace kintsugi::cuda {

using AlgorithmBytes = std::array<std::uint64_t, 8>;  // a cublasLtMatmulAlgo_t

// One shape's outcome: the algorithm and what choosing it measured.
struct TunedAlgorithm {
  AlgorithmBytes algo{};
  int candidates = 0, chosen = 0;  // how many cuBLASLt offered, which won (0: its first choice)
  double ms = 0, first_ms = 0;     // per call: the winner's time, the first choice's
  double tuning_ms = 0;            // what timing them all took
};

class AlgorithmStore {
 public:
  AlgorithmStore(std::string gpu, int multiprocessors, std::int64_t cublaslt_version);
  static std::filesystem::path file();
  // The algorithm chosen for a shape, by this process or (in the file) by any before it.
  std::optional<AlgorithmBytes> find(const std::string& shape) const;
  // Keeps `tuned` for the shape, unless another choice was stored first: returns the one to
  // use. A stored choice equal to `stale` (one this library refused) is replaced.
  AlgorithmBytes store(const std::string& shape, const TunedAlgorithm& tuned,
                       const std::optional<AlgorithmBytes>& stale = std::nullopt) const;

 private:
  std::string key(const std::string& shape) const;  // the process-wide name of a shape's entry
  std::string gpu_;
  int multiprocessors_;
  std::int64_t version_;
};

}  // namespace kintsugi::cuda
