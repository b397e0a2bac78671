#pragma once
// The local half of kintsugi's reduce-scatter over MPI (mpi_communicator.cpp): once every rank's
// copy of this rank's chunk has arrived, they are added here, in rank order, whichever rank owns
// the chunk. A fixed order makes the result the same bits on every run and on every rank count
// that splits the same way; bf16 and f16 round after each addition, as the communicator's
// all-reduce does (mpi_types.cpp).
#include <cstdint>
#include <span>

#include "kintsugi/core/tensor.hpp"

namespace kintsugi {

// out[i] = sources[0][i] + sources[1][i] + ... for i < count, in that order. `out` may be one of
// the sources (element for element, not shifted).
void sum_chunks(DType dtype, std::span<const void* const> sources, void* out, std::int64_t count);

}  // namespace kintsugi
