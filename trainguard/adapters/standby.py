"""A warm spare: one rank's next start, minus the fault, waiting to run the script body.

The standby pool (:mod:`trainguard.adapters.standby_pool`) starts this script with the same
interpreter, interpreter flags (``-u``, ``-B``), working directory and **full environment** the
rank will get in the next round, stdout and stderr on a regular file (as a rank's log is), so
the interpreter sets up stdio buffering, encoding and signal dispositions exactly as a cold
start of the rank would. It then talks over stdin, one JSON object per line:

``{"argv": [...], "module": bool, "status": PATH, "out": PATH}``
    first: ``sys.argv`` and ``sys.path[0]`` become what a cold start has before its first line;
    events go to ``status`` (JSON lines), import-time output collects in ``out``.
``{"preload": ["name", ...]}``
    import these, in order, with the rank's environment already set (stdlib modules and the
    script's own are skipped). A module that is not found is skipped (``{"dropped": name}``); one
    whose import raises anything else, or that leaves a Python thread running, CUDA initialised
    or a process group open, taints the spare: it writes ``{"tainted": name, "why": ...}`` to
    ``status`` and exits 3 (the pool drops the name and starts a clean spare). ``{"ready": n}``
    follows every message. Once the hand-over has arrived, the names still queued are
    imported without judgement (the script would import them anyway; a failure is left for its
    own import to meet): a spare that became the rank never exits on its own.
``{"run": {"env": {...}, "log": PATH}}``
    become the rank: the import-time output goes to the log first, stdin becomes /dev/null,
    stdout and stderr the log, the environment the launch's (only per-start variables differ,
    see ``PER_START_VARS`` in the pool), and the script runs as ``__main__``.

Run as a script: it imports nothing of trainguard, so it works with any Python the command names.
"""

import os
import sys

_HERE = os.path.abspath(__file__)
_UNREAD = bytearray()
_RUN = b'{"run"'


def _lines():
    """The next line of stdin, read with os.read so ``sys.stdin`` keeps no read-ahead."""
    buffer = _UNREAD
    while b"\n" not in buffer:
        chunk = os.read(0, 65536)
        if not chunk:
            return None
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def _run_waiting():
    """Whether the hand-over has arrived: from then on this process is the rank."""
    import select
    while select.select([0], [], [], 0)[0]:
        chunk = os.read(0, 65536)
        if not chunk:
            break
        _UNREAD.extend(chunk)
    return _RUN in _UNREAD


def _script_dir(path):
    """``sys.path[0]`` of ``python path``: the script's directory, a symlinked script followed."""
    seen = 0
    while os.path.islink(path) and seen < 40:
        target = os.readlink(path)
        path = target if os.path.isabs(target) else os.path.join(os.path.dirname(path), target)
        seen += 1
    return os.path.dirname(os.path.abspath(path))


class _Spare:
    def __init__(self, prep):
        self.argv = list(prep["argv"])
        self.module = bool(prep["module"])
        self.status = os.open(prep["status"], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.out = prep["out"]
        self.imported = 0
        if self.module:
            sys.argv = ["-m", *self.argv[1:]]
            sys.path[0] = os.getcwd()
        else:
            sys.argv = list(self.argv)
            sys.path[0] = _script_dir(self.argv[0])
        self.own = (sys.path[0], os.getcwd())

    def say(self, **record):
        import json
        os.write(self.status, (json.dumps(record) + "\n").encode())

    def _skip(self, name):
        """Stdlib modules and the script's own (found beside it or in the working directory)."""
        import importlib.util
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in sys.builtin_module_names:
            return True
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return True
        if spec is None:
            return True
        where = list(spec.submodule_search_locations or ()) or [spec.origin or ""]
        return not where[0] or os.path.dirname(where[0]) in self.own

    def preload(self, names):
        """Import ``names``, in order; after the hand-over has arrived, without judging them."""
        for name in names:
            if name in sys.modules or self._skip(name):
                continue
            if _run_waiting():
                # Now the rank: what the script would import anyway is imported as it would be,
                # and a failure is left for the script's own import to meet.
                try:
                    __import__(name)
                except Exception:
                    pass
                continue
            try:
                __import__(name)
            except ModuleNotFoundError as exc:
                # Not importable here (an optional dependency is missing): the rank will not
                # have it either; nothing of it stays loaded.
                self.say(dropped=name, why=f"{type(exc).__name__}: {exc}"[:300])
                continue
            except BaseException as exc:  # an import that raises anything else is not preloaded
                self._taint(name, f"{type(exc).__name__}: {exc}")
            why = _misbehaviour()
            if why:
                self._taint(name, why)
            self.imported += 1
        self.say(ready=self.imported)

    def _taint(self, name, why):
        self.say(tainted=name, why=why[:300])
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)

    def become(self, launch):
        # Not flushed: what the imports left in sys.stdout's buffer reaches the log when a cold
        # start's would, after fd 1 has become the log; what they wrote out is copied first.
        log_fd = os.open(launch["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            with open(self.out, "rb") as early:  # what the imports printed belongs to the rank
                while True:
                    chunk = early.read(1 << 16)
                    if not chunk:
                        break
                    os.write(log_fd, chunk)
            os.unlink(self.out)
        except OSError:
            pass
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.close(null_fd)
        os.close(self.status)
        os.environ.clear()
        os.environ.update(launch["env"])
        if self.module:
            import runpy
            sys.argv = ["-m", *self.argv[1:]]
            sys.modules["__main__"] = _fresh_main()
            runpy._run_module_as_main(self.argv[0], alter_argv=True)
        else:
            sys.argv = list(self.argv)
            _run_script(self.argv[0])


def _misbehaviour():
    """What an import did that a spare must not do before the restart, or ''."""
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return "started a thread: %s" % ", ".join(t.name for t in threading.enumerate()[1:])
    cuda = sys.modules.get("torch.cuda")
    if cuda is not None and getattr(cuda, "is_initialized", lambda: False)():
        return "initialised CUDA"
    dist = sys.modules.get("torch.distributed")
    if dist is not None and getattr(dist, "is_available", lambda: False)() and dist.is_initialized():
        return "opened a process group"
    return ""


def _fresh_main():
    import types
    main = types.ModuleType("__main__")
    main.__builtins__ = sys.modules["builtins"]
    main.__annotations__ = {}
    return main


def _run_script(path):
    """Run ``path`` as ``python path`` does: in a fresh ``__main__`` with an absolute ``__file__``."""
    from importlib.machinery import SourceFileLoader
    filename = os.path.abspath(path)
    main = _fresh_main()
    main.__file__ = filename
    main.__cached__ = None
    main.__loader__ = SourceFileLoader("__main__", filename)
    sys.modules["__main__"] = main
    with open(filename, "rb") as handle:
        source = handle.read()
    exec(compile(source, filename, "exec", dont_inherit=True), main.__dict__)


def main():
    import json
    line = _lines()
    if line is None:
        return 0
    spare = _Spare(json.loads(line))
    while True:
        line = _lines()
        if line is None:
            return 0
        message = json.loads(line)
        if "preload" in message:
            spare.preload(message["preload"])
        elif "run" in message:
            break
    try:
        spare.become(message["run"])
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException:
        # As a cold start reports it: the traceback starts at the script, not in this file.
        kind, value, tb = sys.exc_info()
        while tb is not None and tb.tb_frame.f_code.co_filename == _HERE:
            tb = tb.tb_next
        sys.excepthook(kind, value, tb)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
