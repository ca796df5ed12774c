"""The black-box suite's collection rule for its second run.

scripts/test.sh runs this directory twice, with MNEMO_IO_LOOP=uring and then =epoll, to test
mnemod's two event loops. A test parametrized to run memcached alone (the reference side of a
`kind`/server parameter) tests nothing of mnemod, so the epoll run leaves it out: it ran, and
had to pass, in the first run. Tests that compare both servers inside one test stay in both runs.
"""
import os


def pytest_collection_modifyitems(config, items):
    if os.environ.get("MNEMO_IO_LOOP") != "epoll":
        return
    keep, reference_only = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec else ()
        (reference_only if any(p == "memcached" for p in params) else keep).append(item)
    if reference_only:
        config.hook.pytest_deselected(items=reference_only)
        items[:] = keep
