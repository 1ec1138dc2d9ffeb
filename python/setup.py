"""pip install ./python: builds weft_torch against an installed Weft (cmake --install build).

Finds Weft through pkg-config (PKG_CONFIG_PATH may point at PREFIX/lib/pkgconfig) or WEFT_PREFIX.
Run with the Python that has torch (Debian: /usr/bin/python3). Debian's Python is externally
managed and lacks pip and setuptools: install python3-pip and python3-setuptools and use a venv
that sees the system's torch, e.g.
    /usr/bin/python3 -m venv --system-site-packages /tmp/weft-venv
    /tmp/weft-venv/bin/pip install --no-build-isolation ./python
The supported route, built and tested by tools/setup.sh and ctest, is CMake's build/python.
"""

import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

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


includes, libdirs = weft_flags()
setup(
    name="weft_torch",
    version="0.1.0",
    description="Weft as a torch.distributed backend",
    packages=["weft_torch"],
    package_dir={"weft_torch": os.path.join(HERE, "weft_torch")},
    ext_modules=[CppExtension(
        "weft_torch._weft_torch",
        [os.path.join(HERE, "csrc", name) for name in ("process_group_weft.cc", "weft_work.cc", "module.cc")],
        include_dirs=includes, library_dirs=libdirs, runtime_library_dirs=libdirs, libraries=["weft"],
        extra_compile_args=["-std=c++17"])],
    cmdclass={"build_ext": BuildExtension},
)
