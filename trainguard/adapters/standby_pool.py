"""Warm spares: each rank's next start prepared ahead, so a restart runs only the script body.

Most of a restart round is a new interpreter importing the same modules again. The pool keeps
one spare per running rank (:mod:`trainguard.adapters.standby`), started with everything the
rank's next start will have:

- the **full environment** of the rank's next round: its current launch's, with the round and
  start counters advanced, ``MASTER_PORT`` the rendezvous port reserved for the next whole-job
  start (:meth:`StandbyPool.rendezvous_port`), and the adapter's per-start paths;
- the same interpreter (as the command names it), interpreter flags, working directory,
  ``sys.argv`` and ``sys.path``; stdio on a regular file, so buffering (``-u``,
  ``PYTHONUNBUFFERED``) and signal dispositions are set up by the interpreter as for a cold start;
- the modules the rank imports, learned from its first start (:mod:`trainguard.adapters.preload`)
  and any ``--preload`` names, imported with that environment already set, so a module that
  reads ``RANK``, ``LOCAL_RANK``, ``CUDA_VISIBLE_DEVICES`` or ``OMP_NUM_THREADS`` at import time
  sees the rank's values.

A spare is used only when the launch matches what it was prepared with
(:mod:`trainguard.adapters.standby_match`); otherwise the rank starts cold and the round's notes
say why. Each spare is a :class:`~trainguard.adapters.standby_spare.Spare`.

Modes (``--warm-standby``): ``true`` keeps spares whatever they cost; ``auto`` (the default)
keeps them only while :mod:`trainguard.adapters.headroom` says the host can afford them, and
says once when it cannot; ``false`` keeps none and learns nothing. Only ``python script.py``
and ``python -m module`` commands (flags ``-u``, ``-B``) can be run this way; others start cold.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from trainguard.adapters import Launch, headroom
from trainguard.adapters.preload import Learner, install_hook, learn_seconds, learning_env, spare_delay
from trainguard.adapters.standby_match import (
    PER_START_VARS,
    PythonEntry,
    env_differences,
    next_round_env,
    python_entry,
    why_unusable,
)
from trainguard.adapters.standby_spare import Spare

# The matching names stay importable from here, where callers and tests have always found them.
__all__ = ["PER_START_VARS", "PythonEntry", "StandbyPool", "env_differences", "next_round_env", "python_entry"]

log = logging.getLogger(__name__)

_STANDBY = Path(__file__).with_name("standby.py")
# How often ``auto`` looks at the host's free memory while spares are held (seconds).
_HEADROOM_EVERY = 1.0


class StandbyPool:
    """The spares of one job; see the module docstring.

    ``register``/``unregister`` tell the caller of every process started and ended (the
    guardian), ``kill`` ends a process group, ``per_start_env(rank, round)`` gives the adapter's
    own per-start variables, and ``spare_tag`` is the process tag every spare carries.
    """

    def __init__(self, *, job_id: str, mode: str, preload: Sequence[str], log_dir: Path,
                 register: Callable[[int], None], unregister: Callable[[int], None],
                 kill: Callable[[int], None], per_start_env: Callable[[int, int], Mapping[str, str]],
                 spare_tag: tuple[str, str]) -> None:
        self.job_id = job_id
        self.mode = mode
        self.dir = log_dir / "standby"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.register, self.unregister, self.kill = register, unregister, kill
        self.per_start_env = per_start_env
        self.spare_tag = spare_tag
        self.names: list[str] = list(dict.fromkeys(preload))  # explicit first, then learned
        self._dropped: set[str] = set()
        self._launches: dict[int, Launch] = {}  # each rank's latest launch, as the engine built it
        self._rank_pids: dict[int, int] = {}
        self._spares: dict[int, Spare] = {}
        self._serial = 0
        self._learners: dict[int, Learner] = {}
        self._learned = False
        self._learn_seconds = learn_seconds()
        self._hook_dir: Path | None = None
        self._notes: list[str] = []
        self._said_memory = False
        self._said_command = False
        self._checked_at = 0.0
        self._cost = 0
        self._port: socket.socket | None = None
        self.warm: frozenset[int] = frozenset()
        # Ranks that started cold are importing; spares started now would take their CPU (and
        # slow a start that hang detection is timing), so they wait for those ranks to settle.
        self._settle_delay = spare_delay()
        self._settling: set[int] = set()
        self._settle_until = 0.0

    # -- the rendezvous port of the next whole-job start ------------------------------------

    def rendezvous_port(self) -> int:
        """The port reserved for this whole-job start (spares were prepared with it); the next
        one is reserved at once. The reservation is a bound socket, closed when handed out."""
        sock = self._port or self._reserve()
        port = int(sock.getsockname()[1])
        sock.close()
        self._port = self._reserve()
        return port

    def _reserve(self) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        return sock

    def _next_port(self) -> int:
        self._port = self._port or self._reserve()
        return int(self._port.getsockname()[1])

    # -- starts -----------------------------------------------------------------------------

    def take(self, launch: Launch, log_path: Path) -> subprocess.Popen[bytes] | None:
        """The rank's spare, now running ``launch``; None when there is none that fits (start cold)."""
        rank = launch.instance.rank
        spare = self._spares.pop(rank, None)
        if spare is None:
            return None
        why = why_unusable(spare.entry, spare.cwd, spare.env, launch)
        if not why and spare.popen.poll() is not None:
            why = "it had ended"
        if not why:
            self._stream(spare)
            if spare.send({"run": {"env": dict(launch.env), "log": str(log_path)}}):
                spare.close_stdin()
                return spare.popen
            why = "it did not answer"
        self._note(f"rank {rank} started cold: its spare was unusable ({why})")
        self._end(spare)
        return None

    def cold(self, launch: Launch) -> Launch:
        """The launch of a cold start: while the imports are not learned yet, with the hook."""
        if self._learned or python_entry(launch.command) is None:
            return launch
        if self._hook_dir is None:
            self._hook_dir = install_hook(self.dir / "hook")
        rank = launch.instance.rank
        out = self.dir / f"rank-{rank}.round-{launch.restart_round}.imports"
        out.unlink(missing_ok=True)
        self._learners[rank] = Learner(out, self._learn_seconds)
        return Launch(launch.instance, launch.command,
                      learning_env(launch.env, self._hook_dir, out, self._learn_seconds),
                      launch.cwd, launch.restart_round)

    def started(self, launches: Sequence[Launch], pids: Mapping[int, int], warm: frozenset[int]) -> None:
        """``launches`` are running (``warm``: the ranks that took a spare): prepare their next starts."""
        self.warm = warm
        for launch in launches:
            self._launches[launch.instance.rank] = launch
            self._rank_pids[launch.instance.rank] = pids[launch.instance.rank]
        self._settling = {launch.instance.rank for launch in launches} - set(warm)
        self._settle_until = time.monotonic() + self._settle_delay if self._settling else 0.0
        self.tick()

    def saw_step(self, rank: int, epoch: float) -> None:
        """The rank reported its first training step (SDK): what it imported is learned."""
        self._settling.discard(rank)
        learner = self._learners.get(rank)
        if learner is not None:
            learner.stop_at(epoch)

    def ended(self, rank: int) -> None:
        """The rank's process ended: learn what it had imported, and it needs no spare for now."""
        self._rank_pids.pop(rank, None)
        learner = self._learners.get(rank)
        if learner is not None:
            self._learn(learner.read(ended=True))

    def notes(self) -> tuple[str, ...]:
        """What the pool has to say since the last call (once each), for the round's notes."""
        notes, self._notes = tuple(self._notes), []
        return notes

    # -- upkeep -----------------------------------------------------------------------------

    def tick(self) -> None:
        """Learn, hear from the spares, stream them new names, and keep one per rank if affordable."""
        for learner in self._learners.values():
            self._learn(learner.read())
        if self._learners and all(learner.done for learner in self._learners.values()) and not self._learned:
            self._learned = True
            log.info("[%s] learned %d module(s) to preload in spares", self.job_id, len(self.names))
        for rank, spare in list(self._spares.items()):
            self._hear(spare)
            if spare.popen.poll() is not None:
                del self._spares[rank]
                self._end(spare)
        self._upkeep()
        for spare in self._spares.values():
            self._stream(spare)

    def _learn(self, names: list[str]) -> None:
        known = set(self.names)
        self.names.extend(name for name in dict.fromkeys(names) if name not in known)

    def _hear(self, spare: Spare) -> None:
        for event in spare.events():
            if "ready" in event and self._learned and spare.sent == len(self.names):
                spare.complete = True
            name = event.get("tainted") or event.get("dropped")
            if name and name not in self._dropped:
                self._dropped.add(name)
                self._note(f"not preloaded any more: {name} ({event.get('why', '')})")

    def _stream(self, spare: Spare) -> None:
        if spare.sent < len(self.names):
            names = [n for n in self.names[spare.sent:] if n not in self._dropped]
            if names and not spare.send({"preload": names}):
                return
            spare.sent = len(self.names)

    def _upkeep(self) -> None:
        wanted = []
        for rank, launch in sorted(self._launches.items()):
            if rank not in self._rank_pids:
                continue
            entry = python_entry(launch.command)
            if entry is None:
                self._say_command(launch)
                continue
            env = self._prepared_env(rank, launch)
            spare = self._spares.get(rank)
            if spare is not None and (spare.entry != entry or env_differences(spare.env, env)):
                del self._spares[rank]  # prepared for a start that will not happen
                self._end(spare)
                spare = None
            if spare is None:
                wanted.append((rank, launch, entry, env))
        if wanted and self._settling & set(self._rank_pids) and time.monotonic() < self._settle_until:
            return  # cold ranks are still starting (no SDK step yet): let them have the CPU
        if self.mode == "auto" and not self._affordable(len(wanted)):
            return
        for rank, launch, entry, env in wanted:
            self._spares[rank] = self._spawn(rank, launch, entry, env)

    def _prepared_env(self, rank: int, launch: Launch) -> dict[str, str]:
        env = next_round_env(launch.env, port=self._next_port())
        env.update(self.per_start_env(rank, launch.restart_round + 1))
        env[self.spare_tag[0]] = self.spare_tag[1]
        return env

    def _affordable(self, wanted: int) -> bool:
        now = time.monotonic()
        if not wanted and now - self._checked_at < _HEADROOM_EVERY:
            return True
        self._checked_at = now
        complete = [headroom.rss(s.popen.pid) for s in self._spares.values() if s.complete]
        if complete:
            self._cost = max(complete)
        else:  # a spare grows to what its rank imported: until one is complete, a rank is the bound
            self._cost = max([headroom.rss(pid) for pid in self._rank_pids.values()]
                             + [headroom.rss(s.popen.pid) for s in self._spares.values()], default=0)
        if self._spares:
            judged = headroom.judge(0, self._cost)
            if not judged.ok:
                self._say_memory(judged.reason)
                for rank in list(self._spares):
                    self._end(self._spares.pop(rank))
                return False
        if not wanted:
            return True
        judged = headroom.judge(wanted, self._cost)
        if not judged.ok:
            self._say_memory(judged.reason)
        return judged.ok

    def _spawn(self, rank: int, launch: Launch, entry: PythonEntry, env: Mapping[str, str]) -> Spare:
        self._serial += 1
        # One pair of files per spare: the spare that just became the rank may not have copied
        # its import-time output yet when the next one for the same rank is spawned.
        stem = f"rank-{rank}.spare-{self._serial}"
        status, out = self.dir / f"{stem}.status", self.dir / f"{stem}.out"
        with open(out, "wb") as output:
            popen = subprocess.Popen(
                [entry.interpreter, *entry.flags, str(_STANDBY)], env=dict(env), cwd=launch.cwd,
                stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True)
        self.register(popen.pid)
        spare = Spare(rank, popen, entry, launch.cwd, env, (status, out))
        spare.send({"argv": list(entry.argv), "module": entry.module, "status": str(status), "out": str(out)})
        return spare

    def _end(self, spare: Spare) -> None:
        if spare.popen.poll() is None:
            self.kill(spare.popen.pid)
        spare.close_stdin()
        spare.popen.wait()
        self.unregister(spare.popen.pid)
        spare.status.unlink(missing_ok=True)
        spare.out.unlink(missing_ok=True)

    def _note(self, text: str) -> None:
        log.warning("[%s] warm standby: %s", self.job_id, text)
        self._notes.append(text)

    def _say_memory(self, reason: str) -> None:
        if not self._said_memory:
            self._said_memory = True
            self._note(f"restarts start cold while memory is short: {reason} (--warm-standby=auto)")

    def _say_command(self, launch: Launch) -> None:
        if not self._said_command:
            self._said_command = True
            log.info("[%s] warm standby: %r is not a plain `python script.py` or `python -m module` command; "
                     "restarts start cold", self.job_id, " ".join(launch.command[:3]))

    def close(self) -> None:
        for spare in self._spares.values():
            self._end(spare)
        self._spares.clear()
        if self._port is not None:
            self._port.close()
