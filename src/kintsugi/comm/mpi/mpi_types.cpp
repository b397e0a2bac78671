#include "kintsugi/comm/mpi/mpi_types.hpp"

#include <algorithm>
#include <cstdint>
#include <mutex>

#include "kintsugi/core/error.hpp"
#include "kintsugi/core/half.hpp"

namespace kintsugi {

namespace {

// MPI's user-function signature: inout[i] = in[i] (op) inout[i].
template <float (*to_float)(std::uint16_t), std::uint16_t (*from_float)(float), bool kMax>
void reduce_half(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = to_float(a[i]), y = to_float(b[i]);
    b[i] = from_float(kMax ? std::max(y, x) : x + y);
  }
}

struct HalfOps {
  MPI_Op bf16_sum, bf16_max, f16_sum, f16_max;
};

const HalfOps& half_ops() {
  static HalfOps ops;
  static std::once_flag once;
  std::call_once(once, [] {
    // Commutative: the library may combine contributions in any order.
    MPI_Op_create(&reduce_half<bf16_to_float, float_to_bf16, false>, 1, &ops.bf16_sum);
    MPI_Op_create(&reduce_half<bf16_to_float, float_to_bf16, true>, 1, &ops.bf16_max);
    MPI_Op_create(&reduce_half<f16_to_float, float_to_f16, false>, 1, &ops.f16_sum);
    MPI_Op_create(&reduce_half<f16_to_float, float_to_f16, true>, 1, &ops.f16_max);
  });
  return ops;
}

}  // namespace

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::bf16:
    case DType::f16: return MPI_UINT16_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::i32: return MPI_INT32_T;
  }
  KINTSUGI_ASSERT(false);
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  const bool sum = op == ReduceOp::sum;
  switch (dtype) {
    case DType::f32:
    case DType::f64:
    case DType::i32: return sum ? MPI_SUM : MPI_MAX;
    case DType::bf16: return sum ? half_ops().bf16_sum : half_ops().bf16_max;
    case DType::f16: return sum ? half_ops().f16_sum : half_ops().f16_max;
    case DType::u8: break;
  }
  fail("reductions over {} are not supported", name_of(dtype));
}

}  // namespace kintsugi
