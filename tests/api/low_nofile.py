"""Entry point for end-to-end tests: the broker under an open-file limit of 1,024, soft and hard
(what most machines and containers start processes with), so that raising it is no way out."""

from __future__ import annotations

import resource
import runpy

NOFILE = 1024

if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))
    runpy.run_module("app", run_name="__main__", alter_sys=True)
