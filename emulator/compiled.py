"""Loops over arrays compiled by numba where it is installed (at their first use in a process; later processes
load them from numba's cache on disk), left as the plain Python functions where it is not, the same results,
slower: the shared links' event loop (system/one_bottleneck.py, system/fluid.py) and an exact sum's add
(aggregation/exact.py)."""
from __future__ import annotations


def compile_in(namespace: dict, names, nrt: bool = True, inline=()) -> bool:
    """Each function namespace[name] replaced by its compiled self. Functions that call each other by name are
    compiled together, before any is called (numba binds the names it finds at the first call). `nrt` False:
    no reference counting, for functions that allocate nothing (a third of an event loop's time otherwise).
    `inline`: the names LLVM puts into each caller (numba's forceinline), where a call would cost more than the
    work (arrays passed as structures of many words: an event loop's helpers); numba's own inline="always" ran
    as fast and took 5x as long to compile. False where numba is missing: the plain functions stay."""
    try:
        import numba
    except ImportError:
        return False
    options = {"cache": True}
    if not nrt and hasattr(getattr(numba.core.options, "DefaultOptions", None), "_nrt"):
        options["_nrt"] = False  # numba's private option: a numba without it counts references (slower, same bits)
    for name in names:
        namespace[name] = numba.njit(**options, forceinline=name in inline)(namespace[name])
    return True
