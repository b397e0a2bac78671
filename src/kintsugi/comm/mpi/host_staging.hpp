#pragma once
// Device tensors through MPI: the MPI library reads and writes host memory only (kintsugi does
// not assume a GPU-aware build), so a tensor on a device is staged through a host buffer from
// its device's allocator (page-locked memory for a GPU). The copy to the host happens when the
// operation is submitted, so it sees every op enqueued on the device before; the copy back
// happens when the operation completes, on the group's progress thread, before its handle
// completes. Host tensors pass through untouched.
#include <functional>
#include <memory>

#include "kintsugi/core/tensor.hpp"

namespace kintsugi {

struct StagedTensor {
  Tensor host;  // the tensor itself, or its host copy
  // Runs after the operation: copies a written host copy back to the device and releases the
  // buffer (empty for host tensors).
  std::function<void()> done;
};

// `reads`: the operation reads t (copied to the host now); `writes`: it writes t (copied back
// by done()).
StagedTensor stage(const Tensor& t, bool reads, bool writes);

// A collective's input (read) and output (written), each staged as above; done() does both's.
struct StagedInOut {
  Tensor in, out;
  std::function<void()> done;
};
StagedInOut stage_in_out(const Tensor& in, const Tensor& out);

// a, then b (either may be empty).
std::function<void()> then(std::function<void()> a, std::function<void()> b);

}  // namespace kintsugi
