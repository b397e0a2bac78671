#pragma once
// Whether the memory-bound kernels (elementwise.cu, norms.cu, reductions.cu, embedding.cu) take
// their typed instantiations: the element types of the tensors picked once on the host, each
// load and store of the compiled kernel of one type (device_math.cuh, Typed). Off, every call
// takes the generic kernels, whose loads and stores switch over the element type at run time
// (Ref): the code as it was before the typed kernels, kept so that one GPU run times both.
// Plain C++, so that tests include it.
namespace kintsugi::cuda {

// KINTSUGI_TYPED_KERNELS=0 in the environment turns them off; read once, on the first call.
bool typed_kernels();
// Tests run both paths in one process: overrides the environment from now on.
void set_typed_kernels(bool on);

}  // namespace kintsugi::cuda
