// The embeddings' entry points (backend.hpp): token and position embeddings check their shapes
// and ids and count their bytes once, then run the device backend's implementation.
#include <algorithm>

#include "kintsugi/backend/op_entry.hpp"

namespace kintsugi {

using namespace op_entry;

namespace {
// Token ids: i32, one per row at least.
void check_ids(const Tensor& tokens, std::int64_t rows) {
  KINTSUGI_ASSERT(tokens.dtype == DType::i32 && tokens.numel() >= rows);
}
}  // namespace

void Backend::embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& out,
                                std::int64_t vocab_begin) {
  KINTSUGI_ASSERT(cols(out) == cols(wte));
  check_ids(tokens, rows(out));
  // The gathered rows of wte (all of it at most), the ids, the output.
  const double gathered = bytes(wte, std::min(rows(out), rows(wte)) * cols(wte));
  dispatch(op_call("embedding_forward", 0, bytes(tokens) + gathered + bytes(out), out),
           [&] { device_.do_embedding_forward(tokens, wte, out, vocab_begin); });
}

void Backend::embedding_backward(const Tensor& tokens, const Tensor& dout, const Tensor& dwte,
                                 bool accumulate, std::int64_t vocab_begin) {
  KINTSUGI_ASSERT(cols(dout) == cols(dwte));
  check_ids(tokens, rows(dout));
  // Overwriting writes all of dwte (rows no id names become 0); accumulating reads and writes
  // the rows the ids name.
  const double grad = accumulate
                          ? 2 * bytes(dwte, std::min(rows(dout), rows(dwte)) * cols(dwte))
                          : bytes(dwte);
  dispatch(op_call("embedding_backward", 0, bytes(tokens) + bytes(dout) + grad, dout),
           [&] { device_.do_embedding_backward(tokens, dout, dwte, accumulate, vocab_begin); });
}

void Backend::position_embedding_forward(const Tensor& x, const Tensor& wpe, std::int64_t seq,
                                         std::int64_t first_row) {
  KINTSUGI_ASSERT(cols(x) == cols(wpe) && wpe.shape[0] >= seq && seq > 0);
  const double moved = 2 * bytes(x) + bytes(wpe, std::min(rows(x), seq) * cols(wpe));
  dispatch(op_call("embedding_forward", 0, moved, x),
           [&] { device_.do_position_embedding_forward(x, wpe, seq, first_row); });
}

void Backend::position_embedding_backward(const Tensor& dx, const Tensor& dwpe, std::int64_t seq,
                                          bool accumulate, std::int64_t first_row) {
  KINTSUGI_ASSERT(cols(dx) == cols(dwpe) && dwpe.shape[0] >= seq && seq > 0);
  const double grad =
      accumulate ? 2 * bytes(dwpe, std::min(rows(dx), seq) * cols(dwpe)) : bytes(dwpe);
  dispatch(op_call("embedding_backward", 0, bytes(dx) + grad, dx), [&] {
    device_.do_position_embedding_backward(dx, dwpe, seq, accumulate, first_row);
  });
}

}  // namespace kintsugi
