"""What the chaos soak (:mod:`bench.chaos`) does to the relays: the fault menu, the bad rows it
writes by plain SQL, and the relay processes it starts, kills and restarts."""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from bench import procs
from bench.chaos_servers import FAILOVER_VARIANTS, Pair, alarm
from relay.config import timing
from relay.observe import heartbeat
from tests.support.proxy import TcpProxy
from tests.support.rabbitserver import RabbitNode

#: Rows the database accepts and no message can carry (issue 37), written among the good ones.
BAD_ROWS: dict[str, str] = {
    "payload-5001-digits": "('1' || repeat('0', 5000))::jsonb, NULL",
    "headers-not-an-object": "'{}'::jsonb, '[1]'::jsonb",
    "headers-task-not-an-object": """'{}'::jsonb, '{"x-relay-task": {}}'::jsonb""",
}

#: The faults, drawn at random: a proxy cut (connections reset, new ones refused), stall (no
#: byte forwarded, no error) or freeze (every open connection silent for good, new ones held
#: unanswered: a host that vanished, issue 38's silent peer; the relays must notice by their
#: own deadlines and reconnect) on the relays' way to the database or the broker, for a few
#: seconds; or a relay SIGKILLed or SIGTERMed, then started again.
FAULTS = (
    "db-cut",
    "db-stall",
    "db-freeze",
    "broker-cut",
    "broker-stall",
    "broker-freeze",
    "sigkill",
    "sigterm",
)
#: Production's own faults, each on a throw-away server of the soak's (``--failover``,
#: ``--alarm``): PostgreSQL failing over behind the writer endpoint (stale or silent), and a
#: memory alarm on the RabbitMQ node the relays publish to (publishers blocked). Each lasts
#: 2-8 s and is dealt twice a round: they are what issue 38 measured, and the slowest.
FAILOVER = "db-failover"
ALARM = "broker-alarm"
WEIGHTS = {FAILOVER: 2, ALARM: 2}


def menu(*, failover: bool, alarm: bool) -> tuple[str, ...]:
    """:data:`FAULTS`, with the faults of production the soak's servers allow."""
    return FAULTS + (FAILOVER,) * failover + (ALARM,) * alarm


def write_bad_row(engine: sa.Engine, kind: str) -> int:
    """Insert one bad row of ``kind`` by plain SQL, as another team's service would; its id."""
    values = BAD_ROWS[kind]
    sql = f"INSERT INTO outbox (event_type, payload, headers) VALUES ('chaos.bad', {values}) "
    with engine.begin() as conn:
        return int(conn.execute(sa.text(sql + "RETURNING id")).scalar_one())


@dataclass
class Relay:
    """One ``relay dispatch --loop`` process of the soak and what happened to it."""

    name: str
    env: dict[str, str]
    log_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    #: Set while the soak itself is ending the process (SIGKILL, SIGTERM).
    told: bool = False
    starts: int = 0
    #: Exits nobody asked for: (return code, the log's last lines).
    own_exits: list[tuple[int, str]] = field(default_factory=list)
    #: Spells ``relay probe live`` found it stale: (start, end) wall-clock times.
    hung: list[tuple[float, float]] = field(default_factory=list)
    #: Every process it ran, in order (the pid is in the ``locked_by`` of the rows it leased).
    pids: list[int] = field(default_factory=list)
    _stale_since: float | None = None

    @property
    def beat(self) -> Path:
        return self.log_dir / f"{self.name}.alive"

    @property
    def log(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def start(self) -> None:
        self.look(alive=False)
        # The last process's beats are not this one's: stale, and a SIGUSR1 sent on them before
        # the new process set its stack dump would end it.
        self.beat.unlink(missing_ok=True)
        self.starts += 1
        argv = [*procs.relay_command(), "--heartbeat-file", str(self.beat)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, env=self.env, stdout=out, stderr=out)
        self.pids.append(self.proc.pid)
        self.told = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def live(self) -> bool:
        """``relay probe live`` on its heartbeat file (True until the first pass wrote it)."""
        return not self.beat.exists() or heartbeat.live(str(self.beat))[0]

    def stale_for(self) -> float:
        """Seconds since ``relay probe live`` first found it stale (0: it is live)."""
        return 0.0 if self._stale_since is None else time.time() - self._stale_since

    def look(self, *, alive: bool = True) -> None:
        """Note a stale spell's start (and ask the relay for its stacks: what it waits on, in
        its log) or its end."""
        now = time.time()
        stale = alive and self.alive() and not self.live()
        if stale and self._stale_since is None:
            self._stale_since = now
            if self.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(signal.SIGUSR1)
        elif not stale and self._stale_since is not None:
            self.hung.append((self._stale_since, now))
            self._stale_since = None

    def check(self) -> bool:
        """Restart the process if it exited on its own (recorded); True if it had."""
        if self.proc is None or self.alive() or self.told:
            return False
        tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        self.own_exits.append((int(self.proc.returncode), tail))
        self.start()
        return True

    def stop(self, sig: signal.Signals = signal.SIGTERM, wait: float = 60.0) -> float | None:
        """Send ``sig`` and wait for the exit; the seconds it took (None: killed after ``wait``)."""
        if not self.alive() or self.proc is None:
            return 0.0
        self.told = True
        sent = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            return None
        return time.monotonic() - sent


@dataclass
class Injector:
    """Deals faults from ``faults`` in rounds (each fault of the menu once a round, those of
    :data:`WEIGHTS` that many times, in a random order: a soak covers the whole menu rather
    than leaving a fault out by chance) and applies them; keeps the record. ``pair`` and
    ``node`` are the soak's own servers for :data:`FAILOVER` and :data:`ALARM`; ``sent``
    counts the rows sent, to time delivery's return after an alarm."""

    relays: list[Relay]
    db: TcpProxy
    broker: TcpProxy
    rng: random.Random
    faults: tuple[str, ...] = FAULTS
    pair: Pair | None = None
    node: RabbitNode | None = None
    sent: Callable[[], int] | None = None
    log: list[dict[str, object]] = field(default_factory=list)
    #: Seconds each SIGTERMed relay took to exit (None: it had to be killed).
    stop_seconds: list[float | None] = field(default_factory=list)
    _deck: list[str] = field(default_factory=list)

    def _deal(self) -> str:
        if not self._deck:
            self._deck = [f for f in dict.fromkeys(self.faults) for _ in range(WEIGHTS.get(f, 1))]
            self.rng.shuffle(self._deck)
        return self._deck.pop()

    def one(self, stop: Callable[[], bool]) -> None:
        """Apply one fault: a proxy fault, a failover's wrong endpoint or an alarm lasts 2-8 s
        (ended early when ``stop()`` turns true)."""
        kind = self._deal()
        at = time.time()
        entry: dict[str, object] = {"fault": kind, "at": at}
        if kind == "sigkill":
            relay = self.rng.choice(self.relays)
            entry["relay"] = relay.name
            relay.stop(signal.SIGKILL)
            relay.start()
        elif kind == "sigterm":
            entry |= self._sigterm()
        elif kind == FAILOVER:
            assert self.pair is not None, "a failover needs the soak's primary and standby"
            variant = self.rng.choice(FAILOVER_VARIANTS)
            entry |= self.pair.fail_over(variant, lambda: self._hold(entry, stop))
        elif kind == ALARM:
            assert self.node is not None, "an alarm needs the soak's RabbitMQ node"
            assert self.sent is not None
            entry |= alarm(self.node, lambda: self._hold(entry, stop), self.sent)
        else:
            proxy = self.db if kind.startswith("db") else self.broker
            if kind.endswith("cut"):
                proxy.cut()
            elif kind.endswith("freeze"):
                proxy.freeze()
            else:
                proxy.stall()
            try:
                self._hold(entry, stop)
            finally:
                proxy.restore()
        entry["took"] = round(time.time() - at, 1)
        self.log.append(entry)

    def _hold(self, entry: dict[str, object], stop: Callable[[], bool]) -> None:
        """Let a fault last 2-8 s. A third of them also SIGTERM a relay halfway through
        (restarted while the fault lasts): the stop bound while a server is gone, frozen or
        blocking, and a start into an outage."""
        seconds = self.rng.uniform(2.0, 8.0)
        entry["seconds"] = round(seconds, 1)
        term_at = time.monotonic() + seconds / 2 if self.rng.random() < 1 / 3 else None
        end = time.monotonic() + seconds
        while time.monotonic() < end and not stop():
            if term_at is not None and time.monotonic() >= term_at:
                entry["sigterm"], term_at = self._sigterm(), None
            time.sleep(0.1)  # the fault's duration: the scenario, not a synchronisation

    def _sigterm(self) -> dict[str, object]:
        """SIGTERM a relay, time its exit, start it again."""
        relay = self.rng.choice(self.relays)
        took = relay.stop(signal.SIGTERM, wait=timing.STOP_SECONDS + 30)
        self.stop_seconds.append(took)
        relay.start()
        return {"relay": relay.name, "exit_seconds": None if took is None else round(took, 2)}

    def counts(self) -> dict[str, int]:
        """How many of each fault, and of SIGTERMs sent during one (``sigterm-during-db-cut``)."""
        out = dict.fromkeys(self.faults, 0)
        for entry in self.log:
            out[str(entry["fault"])] += 1
            if "sigterm" in entry:
                during = f"sigterm-during-{entry['fault']}"
                out[during] = out.get(during, 0) + 1
        return out


def stop_all(relays: list[Relay]) -> list[float | None]:
    """SIGTERM every relay at once (one signal each: a second one forces the exit); each one's
    seconds to exit (None: killed after the bound and a margin)."""
    sent = time.monotonic()
    running = [r for r in relays if r.alive() and r.proc is not None]
    for r in running:
        r.told = True
        assert r.proc is not None
        with contextlib.suppress(ProcessLookupError):
            r.proc.send_signal(signal.SIGTERM)
    took: list[float | None] = []
    for r in running:
        assert r.proc is not None
        try:
            r.proc.wait(timeout=max(0.1, sent + timing.STOP_SECONDS + 30 - time.monotonic()))
            took.append(time.monotonic() - sent)
        except subprocess.TimeoutExpired:
            r.proc.kill()
            r.proc.wait(10)
            took.append(None)
    return took
