"""The compiled kernel (app/store/_kernel.pyx). Everything else about the package is in pyproject.toml.

The extension is optional: where it cannot be built (no C compiler, or no zlib headers), the install goes on and Wharf
runs its pure-Python twin of every kernel function, saying so at start (app/store/kernel.py)."""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                "app.store._kernel",
                ["app/store/_kernel.pyx"],
                libraries=["z"],  # CRC32: the zlib Python's own zlib module uses
                optional=True,
                extra_compile_args=["-O2"],
            )
        ],
        compiler_directives={"language_level": "3"},
    )
)
