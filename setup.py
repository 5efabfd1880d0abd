"""The compiled kernel (app/store/_kernel*.pyx). Everything else about the package is in pyproject.toml.

The kernel is one extension module per concern; app.store._kernel gathers their functions into the one
namespace app/store/kernel.py loads. The extensions are optional: where they cannot be built (no C
compiler, or no zlib headers), the install goes on and Wharf runs its pure-Python twin of every kernel
function, saying so at start (app/store/kernel.py). One that fails alone takes the kernel with it:
app.store._kernel imports them all."""

from Cython.Build import cythonize
from setuptools import Extension, setup

# The shared layer first (the others cimport its _kernel_base.pxd), the gathering module last.
KERNEL = (
    "_kernel_base",
    "_kernel_records",
    "_kernel_log",
    "_kernel_index",
    "_kernel_produce",
    "_kernel_columns",
    "_kernel_mapped",
    "_kernel",
)

extensions = cythonize(
    [
        Extension(
            f"app.store.{name}",
            [f"app/store/{name}.pyx"],
            libraries=["z"],  # CRC32: the zlib Python's own zlib module uses
            extra_compile_args=["-O2"],
        )
        for name in KERNEL
    ],
    compiler_directives={"language_level": "3"},
)
for extension in extensions:
    # Set here: cythonize does not carry an Extension's optional flag over to the one it returns.
    extension.optional = True

setup(ext_modules=extensions)
