"""pip install ./python: builds weft_torch against an installed Weft (cmake --install build).

Finds Weft through pkg-config (PKG_CONFIG_PATH may point at PREFIX/lib/pkgconfig) or WEFT_PREFIX.
Run with the Python that has torch (Debian: /usr/bin/python3). Debian's Python is externally
managed and lacks pip and setuptools: install python3-pip and python3-setuptools and use a venv
that sees the system's torch, e.g.
    /usr/bin/python3 -m venv --system-site-packages /tmp/weft-venv
    /tmp/weft-venv/bin/pip install --no-build-isolation ./python
The supported route, built and tested by tools/setup.sh and ctest, is CMake's build/python.

CUDA tensors: built in when torch has CUDA (torch.version.cuda), its toolkit is found (CUDA_HOME)
and the installed Weft takes device buffers (weft.pc: gpu=cuda); WEFT_TORCH_CUDA=0 or 1 overrides.
"""

import glob
import os
import subprocess

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

HERE = os.path.dirname(os.path.abspath(__file__))


def weft_flags():
    prefix = os.environ.get("WEFT_PREFIX")
    if prefix:
        return [os.path.join(prefix, "include")], [os.path.join(prefix, "lib")]
    try:
        cflags = subprocess.run(["pkg-config", "--cflags-only-I", "weft"], check=True, capture_output=True,
                                text=True).stdout.split()
        libs = subprocess.run(["pkg-config", "--libs-only-L", "weft"], check=True, capture_output=True,
                              text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("weft_torch: cannot find Weft (install it and set PKG_CONFIG_PATH or WEFT_PREFIX)") from e
    return [f[2:] for f in cflags], [f[2:] for f in libs]


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
cuda = want_cuda()
print(f"weft_torch: CUDA tensors {'built in' if cuda else 'not built (CPU tensors only)'}")
sources = ["process_group_weft.cc", "issuing.cc", "weft_work.cc", "module.cc"] + (["device_lane.cc"] if cuda else [])
Extension = CUDAExtension if cuda else CppExtension
setup(
    name="weft_torch",
    version="0.1.0",
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
