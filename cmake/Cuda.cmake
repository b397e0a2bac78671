# The CUDA backend (-DKINTSUGI_CUDA=ON): its own library, backend/cuda/, seeing core/ and
# backend/ like the CPU backend, linked into kintsugi_backend (whose factory then offers
# Device::cuda). nvcc compiles for compute capability 9.0 (H100/H200) and embeds compute_90 PTX
# so newer GPUs can JIT it; the CUDA runtime is linked statically, cuBLASLt dynamically.
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
set(KINTSUGI_CUDA_ARCHITECTURES "90-real;90-virtual" CACHE STRING
    "GPU architectures to build for (CMake's CUDA_ARCHITECTURES syntax)")
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)  # what CMake 3.25 knows for nvcc; the .cu files need no more
set(CMAKE_CUDA_STANDARD_REQUIRED ON)

kintsugi_layer(NAME kintsugi_backend_cuda DIR backend/cuda SEES core
  LINKS kintsugi_core CUDA::cudart_static CUDA::cublasLt)
file(GLOB KINTSUGI_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kintsugi/backend/cuda/*.cu)
target_sources(kintsugi_backend_cuda PRIVATE ${KINTSUGI_CUDA_SOURCES})
# The lowest compute capability built for: the context refuses older GPUs with a clear message.
list(GET KINTSUGI_CUDA_ARCHITECTURES 0 first_arch)
string(REGEX MATCH "^[0-9]+" min_arch "${first_arch}")
set_target_properties(kintsugi_backend_cuda PROPERTIES
  CUDA_ARCHITECTURES "${KINTSUGI_CUDA_ARCHITECTURES}"
  CUDA_RUNTIME_LIBRARY Static
  POSITION_INDEPENDENT_CODE ON)
target_compile_definitions(kintsugi_backend_cuda PRIVATE KINTSUGI_CUDA_MIN_ARCH=${min_arch})
# cuDNN's graph API for attention (attention_cudnn.hpp): its headers at build time only; the
# library is opened at run time, so the program also runs where cuDNN is not installed.
find_path(CUDNN_INCLUDE_DIR cudnn_graph.h HINTS ${CUDAToolkit_INCLUDE_DIRS}
  /usr/include/x86_64-linux-gnu /usr/include)
if(CUDNN_INCLUDE_DIR)
  message(STATUS "cuDNN headers: ${CUDNN_INCLUDE_DIR}")
  target_include_directories(kintsugi_backend_cuda PRIVATE ${CUDNN_INCLUDE_DIR})
  target_compile_definitions(kintsugi_backend_cuda PRIVATE KINTSUGI_WITH_CUDNN=1)
else()
  message(STATUS "cuDNN headers not found: attention runs on kintsugi's kernels only")
endif()
# Host flags (-march=native, -Wall...) reach nvcc's host compiler, not nvcc itself.
target_compile_options(kintsugi_backend_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wno-unused-parameter --expt-relaxed-constexpr>)

target_link_libraries(kintsugi_backend PUBLIC kintsugi_backend_cuda)
# The backend folder's two files that know which device backends the build has: the factory
# and what the planner reads about a device (device_info.cpp).
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/kintsugi/backend/factory.cpp
  ${PROJECT_SOURCE_DIR}/src/kintsugi/backend/device_info.cpp
  PROPERTIES COMPILE_DEFINITIONS KINTSUGI_WITH_CUDA=1)

# NCCL for GPU ranks (comm/nccl/): its own library, seeing comm/ and the CUDA backend's context
# (the GPU and the compute stream its operations are ordered after); linked into kintsugi_comm,
# whose factory then picks it for GPU tensors. Without NCCL, GPU tensors move through MPI.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  message(STATUS "NCCL: ${NCCL_LIBRARY}")
  kintsugi_layer(NAME kintsugi_comm_nccl DIR comm/nccl SEES core backend
    LINKS kintsugi_comm_mpi kintsugi_backend_cuda ${NCCL_LIBRARY})
  target_include_directories(kintsugi_comm_nccl PRIVATE ${NCCL_INCLUDE_DIR})
  target_link_libraries(kintsugi_comm PUBLIC kintsugi_comm_nccl)
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/kintsugi/comm/factory.cpp APPEND PROPERTY
    COMPILE_DEFINITIONS KINTSUGI_WITH_NCCL=1)
  set(KINTSUGI_NCCL ON)
else()
  message(STATUS "NCCL not found: GPU ranks communicate through MPI")
  set(KINTSUGI_NCCL OFF)
endif()
