// The elementwise ops' and reductions' entry points (backend.hpp): each checks its sizes and
// counts its bytes once, then runs the device backend's implementation.
#include "kintsugi/backend/op_entry.hpp"

namespace kintsugi {

using namespace op_entry;

namespace {
// The f64 [1] a reduction adds to.
void check_scalar(const Tensor& sum) {
  KINTSUGI_ASSERT(sum.dtype == DType::f64 && sum.numel() == 1);
}
}  // namespace

void Backend::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  KINTSUGI_ASSERT(a.numel() == b.numel() && a.numel() == out.numel());
  dispatch(op_call("add", 0, bytes(a) + bytes(b) + bytes(out), out),
           [&] { device_.do_add(a, b, out); });
}

void Backend::add_bias(const Tensor& x, const Tensor& bias) {
  KINTSUGI_ASSERT(bias.numel() == cols(x));
  dispatch(op_call("add", 0, 2 * bytes(x) + bytes(bias), x),
           [&] { device_.do_add_bias(x, bias); });
}

void Backend::scale(const Tensor& x, double factor) {
  dispatch(op_call("scale", 0, 2 * bytes(x), x), [&] { device_.do_scale(x, factor); });
}

void Backend::copy(const Tensor& src, const Tensor& dst) {
  KINTSUGI_ASSERT(src.bytes() == dst.bytes() && src.dtype == dst.dtype);
  dispatch(op_call("copy", 0, bytes(src) + bytes(dst), src), [&] { device_.do_copy(src, dst); });
}

// Reads and writes the copied columns only.
void Backend::copy_columns(const Tensor& src, std::int64_t src_col, const Tensor& dst,
                           std::int64_t dst_col, std::int64_t cols) {
  KINTSUGI_ASSERT(src.shape.rank == 2 && dst.shape.rank == 2 && src.dtype == dst.dtype &&
                  src.shape[0] == dst.shape[0]);
  KINTSUGI_ASSERT(cols >= 0 && src_col >= 0 && dst_col >= 0 && src_col + cols <= src.shape[1] &&
                  dst_col + cols <= dst.shape[1]);
  const Shape copied{src.shape[0], cols};
  dispatch(OpCall{"copy_columns", 0, 2 * bytes(src, copied.numel()), copied, src.dtype},
           [&] { device_.do_copy_columns(src, src_col, dst, dst_col, cols); });
}

void Backend::convert(const Tensor& src, const Tensor& dst) {
  KINTSUGI_ASSERT(src.numel() == dst.numel());
  if (src.dtype != dst.dtype && (!is_float(src.dtype) || !is_float(dst.dtype)))
    fail("convert takes float tensors, not {} to {}", name_of(src.dtype), name_of(dst.dtype));
  dispatch(op_call("convert", 0, bytes(src) + bytes(dst), src),
           [&] { device_.do_convert(src, dst); });
}

void Backend::zero(const Tensor& x) {
  dispatch(op_call("zero", 0, bytes(x), x), [&] { device_.do_zero(x); });
}

void Backend::sum_squares(const Tensor& x, const Tensor& sum) {
  check_scalar(sum);
  dispatch(op_call("sum_squares", 0, bytes(x) + 2 * bytes(sum), x),
           [&] { device_.do_sum_squares(x, sum); });
}

// A multi-range op is one call of its own kind ("adamw_multi", "sum_squares_multi": a profile
// tells which path ran) over all the ranges' elements (dims: their number), moving what the
// single-range op's calls on every range would move, so its roofline floor is theirs.
void Backend::sum_squares_multi(std::span<const Tensor> xs, const Tensor& sum) {
  check_scalar(sum);
  double moved = 2 * bytes(sum);
  std::int64_t n = 0;
  for (const Tensor& x : xs) {
    moved += bytes(x);
    n += x.numel();
  }
  const DType dtype = xs.empty() ? DType::f32 : xs.front().dtype;
  dispatch(OpCall{"sum_squares_multi", 0, moved, Shape{n}, dtype},
           [&] { device_.do_sum_squares_multi(xs, sum); });
}

}  // namespace kintsugi
