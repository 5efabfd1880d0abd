# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Faulting a mapped file's pages in without the GIL, compiled. Twin:
``app.store.mapped_file.python_populate`` (``populate``).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint8_t, uint64_t


# ---------------------------------------------------------------------------------------------
# Faulting a prepared segment's pages in ahead of the writer (app.store.mapped_file.populate).

cdef extern from "sys/mman.h" nogil:
    int madvise(void* addr, size_t length, int advice)

cdef enum:
    MADV_POPULATE_READ = 22  # Linux 5.14: fault pages in for reading, without touching them
    TOUCH_PAGE = 4096


def populate(mm, Py_ssize_t start, Py_ssize_t length):
    """Fault in the pages of ``mm[start:start + length]`` for reading, with the GIL released, so the
    writer's first touch of each page costs it no page allocation. Changes no byte, dirties no
    page. Reads a byte of each page itself where the system has no MADV_POPULATE_READ."""
    cdef Py_buffer view
    cdef uint8_t* base
    cdef Py_ssize_t at, end
    cdef uint64_t seen = 0
    cdef int failed
    PyObject_GetBuffer(mm, &view, PyBUF_SIMPLE)
    try:
        if start < 0 or length <= 0 or start >= view.len:
            return 0
        end = start + length if start + length < view.len else view.len
        base = <uint8_t*>view.buf
        with nogil:
            # madvise wants a page-aligned address; segments are mapped whole, from a page boundary.
            at = start - start % TOUCH_PAGE
            failed = madvise(base + at, <size_t>(end - at), MADV_POPULATE_READ)
            if failed:
                while at < end:
                    seen += (<volatile uint8_t*>base)[at]
                    at += TOUCH_PAGE
        return seen
    finally:
        PyBuffer_Release(&view)
