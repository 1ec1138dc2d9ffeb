"""pip install ./python: builds weft_torch against a Weft that is installed (cmake --install) or
just built (the build tree).

Finds Weft through WEFT_PREFIX (an install prefix), else pkg-config: PKG_CONFIG_PATH may name
PREFIX/lib/pkgconfig, or the build directory, whose weft-uninstalled.pc points at the build tree.
Run with the Python that has torch (Debian: /usr/bin/python3), without build isolation (the
build needs that torch). Debian's Python is externally managed and lacks pip and setuptools:
install python3-pip, python3-setuptools and python3-venv and use a venv that sees the system's
torch, e.g. after tools/setup.sh:
    /usr/bin/python3 -m venv --system-site-packages /tmp/weft-venv
    PKG_CONFIG_PATH=$PWD/build /tmp/weft-venv/bin/pip install --no-build-isolation ./python
The module finds libweft where it was built against (its RUNPATH). The route that tools/setup.sh
and ctest build and test is CMake's build/python.

CUDA tensors: built in when torch has CUDA (torch.version.cuda), its toolkit is found (CUDA_HOME)
and the installed Weft takes device buffers (weft.pc: gpu=cuda); WEFT_TORCH_CUDA=0 or 1 overrides.
"""

import glob
import os
import re
import subprocess

try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
except ImportError as e:
    raise SystemExit("weft_torch: this Python cannot import torch, which the build needs. Use the Python that "
                     "has it (Debian: /usr/bin/python3, or a venv made with --system-site-packages) and pip's "
                     "--no-build-isolation") from e
from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
NOT_FOUND = ("weft_torch: cannot find Weft. Set WEFT_PREFIX to where `cmake --install` put it, or "
             "PKG_CONFIG_PATH to PREFIX/lib/pkgconfig, or to the build directory (build tree, not installed)")


def prefix_libdir(prefix):
    """The directory under an install prefix that holds libweft: lib, lib64 or lib/<triplet>."""
    found = sorted(glob.glob(os.path.join(prefix, "lib*", "libweft.so*")) +
                   glob.glob(os.path.join(prefix, "lib", "*", "libweft.so*")))
    if not found:
        raise SystemExit(f"weft_torch: no libweft.so under WEFT_PREFIX={prefix} (lib, lib64 or lib/<triplet>)")
    return os.path.dirname(found[0])


def weft_flags():
    prefix = os.environ.get("WEFT_PREFIX")
    if prefix:
        return [os.path.join(prefix, "include")], [prefix_libdir(prefix)]
    try:
        cflags = subprocess.run(["pkg-config", "--cflags-only-I", "weft"], check=True, capture_output=True,
                                text=True).stdout.split()
        libs = subprocess.run(["pkg-config", "--libs-only-L", "weft"], check=True, capture_output=True,
                              text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(NOT_FOUND) from e
    return [f[2:] for f in cflags], [f[2:] for f in libs]


def weft_version(includes):
    """The found Weft's version, from its weft.h: the package's version is the library's."""
    for directory in includes:
        header = os.path.join(directory, "weft", "weft.h")
        if os.path.exists(header):
            with open(header) as f:
                text = f.read()
            parts = [re.search(rf"#define WEFT_{part}\s+(\d+)", text) for part in ("MAJOR", "MINOR", "PATCH")]
            if all(parts):
                return ".".join(m.group(1) for m in parts)
    raise SystemExit(f"weft_torch: no weft/weft.h with a version in {includes}. " + NOT_FOUND)


def weft_gpu():
    """What device buffers the installed Weft takes: cuda, hip or none (weft.pc's gpu variable)."""
    prefix = os.environ.get("WEFT_PREFIX")
    if prefix:  # lib, lib64 or a multiarch lib/<triplet>
        for pc in sorted(glob.glob(os.path.join(prefix, "lib*", "**", "pkgconfig", "weft.pc"), recursive=True)):
            with open(pc) as f:
                for line in f:
                    if line.startswith("gpu="):
                        return line[4:].strip()
        return "none"
    try:
        return subprocess.run(["pkg-config", "--variable=gpu", "weft"], check=True, capture_output=True,
                              text=True).stdout.strip() or "none"
    except (OSError, subprocess.CalledProcessError):
        return "none"


def want_cuda():
    forced = os.environ.get("WEFT_TORCH_CUDA")
    if forced is not None:
        return forced == "1"
    return torch.version.cuda is not None and CUDA_HOME is not None and weft_gpu() == "cuda"


includes, libdirs = weft_flags()
version = weft_version(includes)
cuda = want_cuda()
print(f"weft_torch: Weft {version} from {', '.join(includes + libdirs)}; "
      f"CUDA tensors {'built in' if cuda else 'not built (CPU tensors only)'}")
sources = ["process_group_weft.cc", "issuing.cc", "weft_work.cc", "module.cc", "shared_cpu_allocator.cc",
           "shared_block_pool.cc"]
sources += ["device_lane.cc"] if cuda else []
Extension = CUDAExtension if cuda else CppExtension
setup(
    name="weft_torch",
    version=version,
    description="Weft as a torch.distributed backend",
    packages=["weft_torch"],
    package_dir={"weft_torch": os.path.join(HERE, "weft_torch")},
    ext_modules=[Extension(
        "weft_torch._weft_torch",
        [os.path.join(HERE, "csrc", name) for name in sources],
        include_dirs=includes, library_dirs=libdirs, runtime_library_dirs=libdirs, libraries=["weft"],
        define_macros=[("WEFT_TORCH_CUDA", "1")] if cuda else [],
        extra_compile_args=["-std=c++20"])],
    cmdclass={"build_ext": BuildExtension},
)
