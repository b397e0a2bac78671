#include "kintsugi/comm/mpi/host_staging.hpp"

#include "kintsugi/core/allocator.hpp"
#include "kintsugi/core/host_io.hpp"

namespace kintsugi {

namespace {

// A staging buffer, returned to its device's allocator when the last user lets go.
class StagingBuffer {
 public:
  StagingBuffer(Allocator& allocator, std::size_t bytes)
      : allocator_(allocator), bytes_(bytes), data_(allocator.allocate_staging(bytes)) {}
  ~StagingBuffer() { allocator_.release_staging(data_, bytes_); }
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;
  void* data() const { return data_; }

 private:
  Allocator& allocator_;
  std::size_t bytes_;
  void* data_;
};

}  // namespace

StagedTensor stage(const Tensor& t, bool reads, bool writes) {
  if (t.device == Device::cpu || t.bytes() == 0) return {t, nullptr};
  auto buffer = std::make_shared<StagingBuffer>(allocator_for(t.device), t.bytes());
  Tensor host = t;
  host.data = buffer->data();
  host.device = Device::cpu;
  if (reads) copy_to_host(t, host.data);
  return {host, [t, buffer, writes] {
            if (writes) copy_from_host(buffer->data(), t);
          }};
}

StagedInOut stage_in_out(const Tensor& in, const Tensor& out) {
  StagedTensor a = stage(in, true, false), b = stage(out, false, true);
  return {a.host, b.host, then(std::move(a.done), std::move(b.done))};
}

std::function<void()> then(std::function<void()> a, std::function<void()> b) {
  if (!a) return b;
  if (!b) return a;
  return [a = std::move(a), b = std::move(b)] {
    a();
    b();
  };
}

}  // namespace kintsugi
