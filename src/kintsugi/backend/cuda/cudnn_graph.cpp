// cuDNN's graph API through dlopen (cudnn_graph.hpp). Built only where cuDNN's headers are
// (KINTSUGI_WITH_CUDNN; never in the CUDA emulator's build, which has no cuDNN).
#if KINTSUGI_WITH_CUDNN
#include "kintsugi/backend/cuda/cudnn_graph.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <type_traits>

#include "kintsugi/backend/cuda/context.hpp"
#include "kintsugi/core/error.hpp"

namespace kintsugi::cuda::cudnn {

namespace {

// The functions used, from libcudnn.so.9 (the graph API lives in libcudnn_graph, which it
// loads; its engines may compile kernels at run time through NVRTC).
struct Api {
  size_t (*version)() = nullptr;
  const char* (*error_string)(cudnnStatus_t) = nullptr;
  void (*last_error)(char*, size_t) = nullptr;
  cudnnStatus_t (*create)(cudnnHandle_t*) = nullptr;
  cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t) = nullptr;
  cudnnStatus_t (*create_descriptor)(cudnnBackendDescriptorType_t,
                                     cudnnBackendDescriptor_t*) = nullptr;
  cudnnStatus_t (*destroy_descriptor)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*set_attribute)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                 cudnnBackendAttributeType_t, int64_t, const void*) = nullptr;
  cudnnStatus_t (*get_attribute)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                                 cudnnBackendAttributeType_t, int64_t, int64_t*,
                                 void*) = nullptr;
  cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t) = nullptr;
  cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t,
                           cudnnBackendDescriptor_t) = nullptr;
  std::string problem;  // why cuDNN is not usable ("" when it is)
};

const Api& api() {
  static const Api loaded = [] {
    Api a;
    const char* library = "libcudnn.so.9";
    void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      a.problem = fmt::format("{} cannot be loaded ({})", library, e ? e : "unknown error");
      return a;
    }
    auto symbol = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && a.problem.empty()) a.problem = fmt::format("{} has no {}", library, name);
    };
    symbol(a.version, "cudnnGetVersion");
    symbol(a.error_string, "cudnnGetErrorString");
    symbol(a.last_error, "cudnnGetLastErrorString");
    symbol(a.create, "cudnnCreate");
    symbol(a.set_stream, "cudnnSetStream");
    symbol(a.create_descriptor, "cudnnBackendCreateDescriptor");
    symbol(a.destroy_descriptor, "cudnnBackendDestroyDescriptor");
    symbol(a.set_attribute, "cudnnBackendSetAttribute");
    symbol(a.get_attribute, "cudnnBackendGetAttribute");
    symbol(a.finalize, "cudnnBackendFinalize");
    symbol(a.execute, "cudnnBackendExecute");
    if (!a.problem.empty()) return a;
    if (a.version() < 90000)
      a.problem = fmt::format("{} is cuDNN {}, older than 9.0", library, a.version());
    return a;
  }();
  return loaded;
}

// The handle on the process's GPU, created at the first call that needs one (descriptors of
// tensors and operations need none); "" or why it could not be created.
struct HandleState {
  cudnnHandle_t handle = nullptr;
  std::string problem;
};
const HandleState& handle_state() {
  static const HandleState state = [] {
    HandleState h;
    const Api& a = api();
    if (!a.problem.empty()) {
      h.problem = a.problem;
      return h;
    }
    try {
      Context::get();  // the process's GPU is current from here on
    } catch (const Error& e) {
      h.problem = e.what();
      return h;
    }
    if (const cudnnStatus_t s = a.create(&h.handle); s != CUDNN_STATUS_SUCCESS)
      h.problem = fmt::format("cudnnCreate failed: {}", a.error_string(s));
    return h;
  }();
  return state;
}

// cuDNN's message for a failed call: the status and, where it has one, its last error text.
std::string message(cudnnStatus_t status) {
  const Api& a = api();
  char detail[512] = {};
  a.last_error(detail, sizeof detail);
  return detail[0] ? fmt::format("{}: {}", a.error_string(status), detail)
                   : std::string(a.error_string(status));
}

void check(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw Error(fmt::format("cuDNN: {} failed: {}", what, message(status)));
}

}  // namespace

bool available(std::string* why) {
  const HandleState& h = handle_state();
  if (why) *why = h.problem;
  return h.problem.empty();
}

std::size_t version() { return api().version ? api().version() : 0; }

cudnnHandle_t handle(cudaStream_t stream) {
  std::string why;
  if (!available(&why)) throw Error("cuDNN is not usable: " + why);
  check(api().set_stream(handle_state().handle, stream), "cudnnSetStream");
  return handle_state().handle;
}

Desc::Desc(cudnnBackendDescriptorType_t type) : type_(type) {
  if (!api().problem.empty()) throw Error("cuDNN is not usable: " + api().problem);
  check(api().create_descriptor(type, &d_), "cudnnBackendCreateDescriptor");
}

Desc::~Desc() {
  if (d_) api().destroy_descriptor(d_);
}

Desc& Desc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                std::int64_t count, const void* values) {
  const cudnnStatus_t s = api().set_attribute(d_, name, type, count, values);
  if (s != CUDNN_STATUS_SUCCESS)
    throw Error(fmt::format("cuDNN: setting attribute {} of a descriptor of type {} failed: {}",
                            static_cast<int>(name), static_cast<int>(type_), message(s)));
  return *this;
}
Desc& Desc::set(cudnnBackendAttributeName_t name, std::int64_t v) {
  return set(name, CUDNN_TYPE_INT64, 1, &v);
}
Desc& Desc::set(cudnnBackendAttributeName_t name, const std::vector<std::int64_t>& v) {
  return set(name, CUDNN_TYPE_INT64, static_cast<std::int64_t>(v.size()), v.data());
}
Desc& Desc::set(cudnnBackendAttributeName_t name, cudnnDataType_t v) {
  return set(name, CUDNN_TYPE_DATA_TYPE, 1, &v);
}
Desc& Desc::set(cudnnBackendAttributeName_t name, bool v) {
  return set(name, CUDNN_TYPE_BOOLEAN, 1, &v);
}
Desc& Desc::set(cudnnBackendAttributeName_t name, float v) {
  return set(name, CUDNN_TYPE_FLOAT, 1, &v);
}
Desc& Desc::set(cudnnBackendAttributeName_t name, const Desc& v) {
  cudnnBackendDescriptor_t d = v.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
}

Desc& Desc::finalize() {
  const cudnnStatus_t s = api().finalize(d_);
  if (s != CUDNN_STATUS_SUCCESS)
    throw Error(fmt::format("cuDNN: finalizing a descriptor of type {} failed: {}",
                            static_cast<int>(type_), message(s)));
  return *this;
}

void Graph::tensor(std::int64_t uid, cudnnDataType_t type, const std::vector<std::int64_t>& dims,
                   const std::vector<std::int64_t>& strides, Kind kind) {
  auto d = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d->set(CUDNN_ATTR_TENSOR_DATA_TYPE, type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, dims)
      .set(CUDNN_ATTR_TENSOR_STRIDES, strides)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, std::int64_t{16});
  if (kind == Kind::virtual_) d->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, true);
  if (kind == Kind::by_value) d->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, true);
  d->finalize();
  tensors_.emplace_back(uid, std::move(d));
}

const Desc& Graph::t(std::int64_t uid) const {
  for (const auto& [id, d] : tensors_)
    if (id == uid) return *d;
  throw Error(fmt::format("cuDNN graph: no tensor {}", uid));
}

void Graph::pointwise(cudnnPointwiseMode_t mode, std::int64_t x, std::int64_t y, std::int64_t b,
                      std::int64_t t_uid, std::int64_t axis, cudnnDataType_t precision) {
  auto pw = std::make_unique<Desc>(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, precision);
  if (axis >= 0) pw->set(CUDNN_ATTR_POINTWISE_AXIS, axis);
  pw->finalize();
  auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op->set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, *pw)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, t(x))
      .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, t(y));
  if (b >= 0) op->set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, t(b));
  if (t_uid >= 0) op->set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t(t_uid));
  op->set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, 1.0f)
      .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, 1.0f)
      .finalize();
  parts_.push_back(std::move(pw));
  ops_.push_back(std::move(op));
}

void Graph::matmul(std::int64_t a, std::int64_t b, std::int64_t c) {
  auto mm = std::make_unique<Desc>(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  mm->set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT).finalize();
  auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  op->set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, t(a))
      .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, t(b))
      .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, t(c))
      .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, *mm)
      .finalize();
  parts_.push_back(std::move(mm));
  ops_.push_back(std::move(op));
}

void Graph::reduction(cudnnReduceTensorOp_t reduce, std::int64_t x, std::int64_t y) {
  auto r = std::make_unique<Desc>(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  r->set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce)
      .finalize();
  auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
  op->set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, *r)
      .set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, t(x))
      .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, t(y))
      .finalize();
  parts_.push_back(std::move(r));
  ops_.push_back(std::move(op));
}

void Graph::reshape(std::int64_t x, std::int64_t y) {
  auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
  op->set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, t(x))
      .set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, t(y))
      .finalize();
  ops_.push_back(std::move(op));
}

Plan Graph::build(cudnnHandle_t handle, bool deterministic_only) {
  auto graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const auto& op : ops_) ops.push_back(op->get());
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             static_cast<std::int64_t>(ops.size()), ops.data())
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .finalize();

  Desc heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
      .finalize();
  const Api& a = api();
  std::int64_t count = 0;
  check(a.get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "counting the engine heuristics' results");
  std::vector<std::unique_ptr<Desc>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  std::int64_t returned = 0;
  if (count > 0)
    check(a.get_attribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                          CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned, raw.data()),
          "reading the engine heuristics' results");

  std::string tried;
  for (std::int64_t i = 0; i < returned; ++i) {
    Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t e = engine.get();
    std::int64_t n = 0;
    check(a.get_attribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                          &n, &e),
          "reading an engine configuration's engine");
    std::int64_t index = -1;
    a.get_attribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    std::int64_t note_count = 0;
    a.get_attribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                    CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &note_count, notes);
    cudnnBackendBehaviorNote_t behaviors[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    std::int64_t behavior_count = 0;
    a.get_attribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                    CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &behavior_count, behaviors);
    bool deterministic = true, compiled = false;
    for (std::int64_t k = 0; k < note_count; ++k)
      deterministic &= notes[k] != CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    for (std::int64_t k = 0; k < behavior_count; ++k)
      compiled |= behaviors[k] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    const std::string name =
        fmt::format("engine {} ({}{})", index, compiled ? "runtime-compiled, " : "",
                    deterministic ? "deterministic" : "non-deterministic");
    if (deterministic_only && !deterministic) {
      tried += fmt::format("; {}: skipped", name);
      continue;
    }
    try {
      auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
      plan->finalize();
      std::int64_t workspace = 0;
      check(a.get_attribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                            CUDNN_TYPE_INT64, 1, &n, &workspace),
            "reading a plan's workspace size");
      Plan result{std::move(plan), workspace, name, {}};
      result.keep.push_back(std::move(graph));
      result.keep.push_back(std::move(configs[static_cast<std::size_t>(i)]));
      for (auto& [uid, d] : tensors_) result.keep.push_back(std::move(d));
      for (auto& d : ops_) result.keep.push_back(std::move(d));
      for (auto& d : parts_) result.keep.push_back(std::move(d));
      tensors_.clear(), ops_.clear(), parts_.clear();
      return result;
    } catch (const Error& e) {
      tried += fmt::format("; {}: {}", name, e.what());
    }
  }
  throw Error(fmt::format("cuDNN has no engine for this graph ({} proposed{})", returned,
                          tried));
}

void execute(cudnnHandle_t handle, const Plan& plan, const std::vector<std::int64_t>& uids,
             const std::vector<void*>& pointers, void* workspace) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<std::int64_t>(pointers.size()), pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace)
      .finalize();
  check(api().execute(handle, plan.plan->get(), pack.get()), "cudnnBackendExecute");
}

}  // namespace kintsugi::cuda::cudnn
#endif  // KINTSUGI_WITH_CUDNN
