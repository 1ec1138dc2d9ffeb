// The Python module behind weft_torch: the process group's creator, for
// torch.distributed.Backend.register_backend (done in weft_torch/__init__.py).
#include <pybind11/chrono.h>
#include <torch/python.h>

#include <string>

#include "process_group_weft.hpp"
#include "shared_cpu_allocator.hpp"
#include "weft/weft.h"

PYBIND11_MODULE(_weft_torch, m) {
  m.doc() = "Weft as a torch.distributed backend";
  m.def("create_process_group", &weft_torch::ProcessGroupWeft::create, pybind11::arg("store"), pybind11::arg("rank"),
        pybind11::arg("size"), pybind11::arg("timeout"),
        "Makes this rank's Weft process group (what torch.distributed calls for backend \"weft\").");
  m.def(
      "shared_memory_stats",
      [] {
        const weft_torch::SharedMemoryStats s = weft_torch::sharedMemoryStats();
        pybind11::dict d;
        d["installed"] = s.installed;
        d["live_blocks"] = s.liveBlocks;
        d["live_bytes"] = s.liveBytes;
        d["peak_live_bytes"] = s.peakLiveBytes;
        d["cached_blocks"] = s.cachedBlocks;
        d["cached_bytes"] = s.cachedBytes;
        d["reused"] = s.reused;
        d["fell_back"] = s.fellBack;
        return d;
      },
      "The shared-memory CPU allocator's state: whether a process group installed it, the blocks tensors "
      "hold (count, bytes, the most bytes at once) and those kept for reuse (count and bytes), allocations "
      "served from the kept ones, and large allocations that got ordinary memory.");
  m.def("empty_shared_memory_cache", &weft_torch::releaseSharedMemoryCache,
        "Gives the shared-memory CPU allocator's kept blocks back to the system (as torch.cuda.empty_cache); "
        "returns their bytes.");
  m.attr("shared_min_bytes") = weft_torch::kSharedMinBytes;
  // The libweft this module loaded, as weftGetVersion reports it ("0.1.0").
  int code = 0;
  weftGetVersion(&code);
  m.attr("weft_version") = std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
                           std::to_string(code % 100);
#ifdef WEFT_TORCH_CUDA
  m.attr("cuda_tensors") = true;
#else
  m.attr("cuda_tensors") = false;
#endif
}
