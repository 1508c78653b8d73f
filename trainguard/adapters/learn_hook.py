"""The start-up hook that learns what a rank imports (see :mod:`trainguard.adapters.preload`).

The standby pool copies this file as ``sitecustomize.py`` into a directory of its own and puts
that directory first on ``PYTHONPATH`` for a rank's first (cold) start only. At interpreter
start-up it undoes its own traces, so the script sees what a plain start would show:

- its directory leaves ``sys.path`` (and ``sys.path_importer_cache``), ``PYTHONPATH`` gets its
  original value (or is unset again), and its own variables leave the environment;
- a ``sitecustomize`` it shadows (the user's, or the distribution's) runs as it would have.

Then an audit hook (``sys.addaudithook``: no thread, no signal, no import of its own) records
the names of the non-stdlib modules that enter ``sys.modules``, one line each, ``EPOCH NAME``,
for ``TRAINGUARD_PRELOAD_SECONDS`` seconds, once their import has finished; an import that
failed has left ``sys.modules`` by then (``try: import h2``), so it is not learned.

Run by any Python the user's command names: it imports nothing of trainguard.
"""

import atexit
import os
import sys
import time


def _undo_injection():
    here = os.path.dirname(os.path.abspath(__file__))
    if here in sys.path:
        sys.path.remove(here)
    sys.path_importer_cache.pop(here, None)
    saved = os.environ.pop("TRAINGUARD_PRELOAD_PYTHONPATH", "-")
    if saved.startswith("="):
        os.environ["PYTHONPATH"] = saved[1:]
    else:
        os.environ.pop("PYTHONPATH", None)


def _run_shadowed_sitecustomize():
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    spec = PathFinder.find_spec("sitecustomize")
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _loaded(module):
    """Whether an entry of ``sys.modules`` finished its import (importlib flags it meanwhile)."""
    return not getattr(getattr(module, "__spec__", None), "_initializing", False)


def _record(path, seconds):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    deadline = time.monotonic() + seconds
    stdlib = sys.stdlib_module_names
    modules = sys.modules
    seen = set(modules)
    pending = []  # entered sys.modules, import not finished yet: it may still fail and leave
    state = {"done": False, "count": len(modules)}

    def flush():
        done = [n for n in pending if n not in modules or _loaded(modules[n])]
        if done:
            pending[:] = [n for n in pending if n not in done]
            now = time.time()
            lines = "".join("%.3f %s\n" % (now, n) for n in done if n in modules)
            if lines:
                os.write(fd, lines.encode())

    def hook(event, args):
        # Any audited event will do: ``importlib.import_module`` (lazy modules) raises no
        # ``import`` event, but loading a module opens its file. New modules are the newest
        # entries of ``sys.modules`` (a dict keeps insertion order).
        if state["done"]:
            return
        if len(modules) != state["count"]:
            state["count"] = len(modules)
            new = []
            for name in reversed(modules):
                if name in seen:
                    break
                new.append(name)
            seen.update(new)
            pending.extend(n for n in reversed(new) if isinstance(n, str) and n.partition(".")[0] not in stdlib)
        if pending:
            flush()
        if time.monotonic() > deadline:
            state["done"] = True
            os.close(fd)

    def at_exit():
        if not state["done"]:
            state["done"] = True
            flush()
            os.close(fd)

    sys.addaudithook(hook)
    atexit.register(at_exit)


def _install():
    path = os.environ.pop("TRAINGUARD_PRELOAD_LEARN", None)
    seconds = float(os.environ.pop("TRAINGUARD_PRELOAD_SECONDS", "30") or 30)
    _undo_injection()
    if path:
        _record(path, seconds)
    _run_shadowed_sitecustomize()


_install()
