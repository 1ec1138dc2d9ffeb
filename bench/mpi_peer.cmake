# Included from bench/CMakeLists.txt: the Open MPI peer driver and the memory-bound probe used by
# `bench/compare --peer mpi`. Neither links Weft (the probe compiles in one kernel source, the
# streaming copy); both share weft-perf's table and JSON code.

# mem-bound-probe: plain C++ (memcpy, Weft's streaming-store copy and a vectorisable sum loop),
# no ISA flags, no MPI. It is launched with weftrun, so it needs nothing beyond the C++ runtime.
add_executable(mem-bound-probe
  mem_bound_probe.cc
  ${PROJECT_SOURCE_DIR}/kernels/cpu/copy_streaming.cc
  ${PROJECT_SOURCE_DIR}/tools/weft-perf/perf_common.cc)
target_include_directories(mem-bound-probe PRIVATE ${PROJECT_SOURCE_DIR}/tools ${PROJECT_SOURCE_DIR})
target_compile_options(mem-bound-probe PRIVATE ${WEFT_WARNINGS})
set_target_properties(mem-bound-probe PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)

# mpi-bench: MPI_Allreduce, MPI_Bcast and MPI_Allgather through the MPI C API (Debian: libopenmpi-dev). The C
# component is enough, and it avoids the deprecated C++ bindings. MPI's headers are included
# as SYSTEM headers so that ${WEFT_WARNINGS} (with -Werror) applies to our code only.
find_package(MPI QUIET COMPONENTS C)
if(MPI_C_FOUND)
  add_executable(mpi-bench
    mpi_bench.cc
    ${PROJECT_SOURCE_DIR}/tools/weft-perf/perf_common.cc)
  target_include_directories(mpi-bench PRIVATE ${PROJECT_SOURCE_DIR}/tools)
  target_include_directories(mpi-bench SYSTEM PRIVATE ${MPI_C_INCLUDE_DIRS})
  target_link_libraries(mpi-bench PRIVATE MPI::MPI_C)
  target_compile_options(mpi-bench PRIVATE ${WEFT_WARNINGS})
  set_target_properties(mpi-bench PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
  message(STATUS "MPI ${MPI_C_VERSION} found: "
                 "building mpi-bench for bench/compare --peer mpi")
else()
  message(STATUS "MPI not found (Debian: libopenmpi-dev openmpi-bin): not building "
                 "mpi-bench; bench/compare --peer mpi needs it")
endif()
