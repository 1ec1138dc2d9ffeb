# The GPU path: WEFT_CUDA and WEFT_HIP are ON, OFF or AUTO (the default: CUDA when nvcc is found,
# else HIP when hipcc is found). One library holds one of them; build twice for both.
#
# Sets WEFT_GPU_BACKEND (CUDA, HIP or empty), WEFT_GPU_DEFINITIONS (for every target that includes
# kernels/gpu/gpu_runtime.h), WEFT_GPU_RUNTIME (the runtime library to link) and
# WEFT_GPU_EXTRA_OBJECTS (HIP's kernel object, which hipcc builds outside CMake's languages).
set(WEFT_CUDA AUTO CACHE STRING "Build the CUDA path: ON, OFF or AUTO (on when nvcc is found)")
set(WEFT_HIP AUTO CACHE STRING "Build the HIP path: ON, OFF or AUTO (on when hipcc is found and CUDA is not on)")
set(WEFT_HIP_ARCHITECTURES "gfx90a;gfx908;gfx1030" CACHE STRING "AMD GPU targets of the HIP build")
set_property(CACHE WEFT_CUDA PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE WEFT_HIP PROPERTY STRINGS AUTO ON OFF)

set(WEFT_GPU_BACKEND "")
set(WEFT_GPU_DEFINITIONS "")
set(WEFT_GPU_RUNTIME "")
set(WEFT_GPU_EXTRA_OBJECTS "")

if(WEFT_SANITIZE OR WEFT_FUZZ)
  # Sanitizer and fuzzing builds test the host path; the runtimes are not built for them.
  set(WEFT_CUDA OFF)
  set(WEFT_HIP OFF)
endif()

if(WEFT_CUDA STREQUAL "AUTO" OR WEFT_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(WEFT_GPU_BACKEND CUDA)
  elseif(NOT WEFT_CUDA STREQUAL "AUTO")
    message(FATAL_ERROR "WEFT_CUDA=ON but no CUDA compiler (nvcc) was found")
  endif()
endif()

if(NOT WEFT_GPU_BACKEND AND (WEFT_HIP STREQUAL "AUTO" OR WEFT_HIP))
  find_program(WEFT_HIPCC hipcc)
  find_library(WEFT_AMDHIP64 amdhip64)
  if(WEFT_HIPCC AND WEFT_AMDHIP64)
    set(WEFT_GPU_BACKEND HIP)
  elseif(NOT WEFT_HIP STREQUAL "AUTO")
    message(FATAL_ERROR "WEFT_HIP=ON but hipcc or libamdhip64 was not found (Debian: hipcc libamdhip64-dev)")
  endif()
elseif(WEFT_GPU_BACKEND AND WEFT_HIP AND NOT WEFT_HIP STREQUAL "AUTO")
  message(FATAL_ERROR "WEFT_CUDA and WEFT_HIP are both on: build them in separate build trees")
endif()

if(WEFT_GPU_BACKEND STREQUAL "CUDA")
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    # A100 and H100; set CMAKE_CUDA_ARCHITECTURES for others (no GPU is needed to build).
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(WEFT_GPU_DEFINITIONS WEFT_HAVE_GPU=1)
  set(WEFT_GPU_RUNTIME CUDA::cudart)
  target_sources(weft_objects PRIVATE kernels/gpu/reduce_kernels.cu)
  # CMake 3.25 does not know nvcc 13's C++20 flag: the targets say 17 and the kernel source
  # gets -std=c++20 directly.
  set_target_properties(weft_objects PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}" CUDA_STANDARD 17)
  set_source_files_properties(kernels/gpu/reduce_kernels.cu PROPERTIES COMPILE_OPTIONS "-std=c++20;-O3")
elseif(WEFT_GPU_BACKEND STREQUAL "HIP")
  set(WEFT_GPU_DEFINITIONS WEFT_HAVE_GPU=1 WEFT_GPU_HIP=1)
  set(WEFT_GPU_RUNTIME ${WEFT_AMDHIP64})
  set(hip_object ${CMAKE_BINARY_DIR}/kernels/reduce_kernels.hip.o)
  set(hip_arch_flags "")
  foreach(arch ${WEFT_HIP_ARCHITECTURES})
    list(APPEND hip_arch_flags --offload-arch=${arch})
  endforeach()
  add_custom_command(
    OUTPUT ${hip_object}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/kernels
    COMMAND ${WEFT_HIPCC} -std=c++20 -O3 -fPIC -fvisibility=hidden -x hip ${hip_arch_flags}
            -DWEFT_HAVE_GPU=1 -DWEFT_GPU_HIP=1 -I${PROJECT_SOURCE_DIR}/include -I${PROJECT_SOURCE_DIR}
            -c ${PROJECT_SOURCE_DIR}/kernels/gpu/reduce_kernels.cu -o ${hip_object}
    DEPENDS kernels/gpu/reduce_kernels.cu kernels/gpu/reduce_kernels.h kernels/gpu/gpu_runtime.h
            kernels/float_formats.h include/weft/weft.h
    COMMENT "hipcc: kernels/gpu/reduce_kernels.cu for ${WEFT_HIP_ARCHITECTURES}"
    VERBATIM)
  set(WEFT_GPU_EXTRA_OBJECTS ${hip_object})
endif()

set(WEFT_GPU_BACKEND_BUILT "${WEFT_GPU_BACKEND}" CACHE INTERNAL "The GPU path this tree builds (for .ci/run)")
if(WEFT_GPU_BACKEND)
  target_sources(weft_objects PRIVATE src/gpu/staging_pool.cc src/gpu/stream_wait.cc src/api/device_operation.cc
                                      src/api/device_ipc_allreduce.cc src/api/device_ipc_direct.cc
                                      src/api/device_ipc_sync.cc src/gpu/device_allocation.cc src/gpu/driver_entry_point.cc
                                      transport/cuda_ipc/ipc_buffers.cc transport/cuda_ipc/ipc_user_buffers.cc)
  target_compile_definitions(weft_objects PUBLIC ${WEFT_GPU_DEFINITIONS})
  if(WEFT_GPU_BACKEND STREQUAL "CUDA")
    target_include_directories(weft_objects SYSTEM PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  message(STATUS "Weft GPU path: ${WEFT_GPU_BACKEND}")
else()
  message(STATUS "Weft GPU path: none (host memory only)")
endif()
