#pragma once
// kintsugi's element types and reductions as MPI sees them. MPI has no 16-bit float types: bf16
// and f16 travel as 16-bit words and are reduced by user-defined operations that add (or take
// the maximum) in f32 and round once per addition, as a ring over the same data would.
#include <mpi.h>

#include "kintsugi/comm/communicator.hpp"
#include "kintsugi/core/dtype.hpp"

namespace kintsugi {

MPI_Datatype mpi_type(DType dtype);
// Throws kintsugi::Error for a reduction MPI cannot do on dtype (u8).
MPI_Op mpi_op(ReduceOp op, DType dtype);

}  // namespace kintsugi
