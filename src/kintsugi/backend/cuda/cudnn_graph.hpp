#pragma once
// cuDNN's graph API (its "backend" descriptors), for the graphs the CUDA backend hands to cuDNN
// (attention_cudnn.cpp). libcudnn is opened with dlopen at the first use, so the program runs
// where cuDNN is not installed and then simply never takes that path. Internal to backend/cuda:
// this header brings cuDNN's own (types and enums only; every call goes through the loaded
// library). Built only with cuDNN's headers present (KINTSUGI_WITH_CUDNN).
#include <cudnn_graph.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kintsugi::cuda::cudnn {

// Whether libcudnn.so.9 opened and a handle was created on the process's GPU; `why`, when not,
// says what failed. Tried once per process.
bool available(std::string* why = nullptr);
// cuDNN's version (91400 for 9.14.0); 0 when the library did not load.
std::size_t version();
// The handle, with `stream` as its stream; throws kintsugi::Error when !available().
cudnnHandle_t handle(cudaStream_t stream);

// One descriptor of the backend API, destroyed with this object. The setters throw
// kintsugi::Error naming the attribute and cuDNN's message when cuDNN refuses.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type);
  ~Desc();
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
            std::int64_t count, const void* values);
  Desc& set(cudnnBackendAttributeName_t name, std::int64_t v);
  Desc& set(cudnnBackendAttributeName_t name, const std::vector<std::int64_t>& v);
  Desc& set(cudnnBackendAttributeName_t name, cudnnDataType_t v);
  Desc& set(cudnnBackendAttributeName_t name, bool v);
  Desc& set(cudnnBackendAttributeName_t name, float v);
  Desc& set(cudnnBackendAttributeName_t name, const Desc& v);
  Desc& finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  cudnnBackendDescriptorType_t type_;
};

// An execution plan: the engine cuDNN's heuristics ranked first among those that build (and,
// when asked, that cuDNN does not mark non-deterministic).
struct Plan {
  std::unique_ptr<Desc> plan;
  std::int64_t workspace = 0;  // bytes
  std::string engine;          // "engine 8 (runtime-compiled, deterministic)", for the log
  std::vector<std::unique_ptr<Desc>> keep;  // the graph's descriptors, alive as long as the plan
};

// A graph of tensors and operations under construction. Tensors are named by the unique ids
// the caller gives them; execute() binds those ids to device (or, by value, host) pointers.
class Graph {
 public:
  enum class Kind { memory, virtual_, by_value };
  void tensor(std::int64_t uid, cudnnDataType_t type, const std::vector<std::int64_t>& dims,
              const std::vector<std::int64_t>& strides, Kind kind = Kind::memory);
  // y = mode(x[, b]) (t: BINARY_SELECT's condition; axis: GEN_INDEX's).
  void pointwise(cudnnPointwiseMode_t mode, std::int64_t x, std::int64_t y, std::int64_t b = -1,
                 std::int64_t t = -1, std::int64_t axis = -1,
                 cudnnDataType_t precision = CUDNN_DATA_FLOAT);
  void matmul(std::int64_t a, std::int64_t b, std::int64_t c);  // c = a b, f32 accumulation
  void reduction(cudnnReduceTensorOp_t op, std::int64_t x, std::int64_t y);  // over y's 1-dims
  void reshape(std::int64_t x, std::int64_t y);
  // The operation graph on `handle`, and its plan (which takes the graph's descriptors over);
  // throws kintsugi::Error listing what cuDNN said about each engine when none builds.
  Plan build(cudnnHandle_t handle, bool deterministic_only);

 private:
  const Desc& t(std::int64_t uid) const;
  std::vector<std::pair<std::int64_t, std::unique_ptr<Desc>>> tensors_;
  std::vector<std::unique_ptr<Desc>> ops_, parts_;
};

// Runs `plan` on the handle's stream with these tensors bound (uids[i] -> pointers[i]).
void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<std::int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace);

}  // namespace kintsugi::cuda::cudnn
