"""A client of octosupd's control socket, in Python with the standard
library only, written from docs/control.md and configs/schema/ alone.

The wire: one JSON object a line each way. A request {"id", "op", "args"}
gets exactly one answer with its id ({"ok": true, "data"} or {"ok": false,
"error": {"code", "message"}}); events {"event": name, ...} come in between
on a connection that asked for them. An answer whose id is null is about
the connection itself.

    with Connection(socket_path()) as c:
        hello = c.call("hello")
        c.call("subscribe", {"topics": ["state", "approval"]})
        ev = c.wait_event("approval", lambda e: e["state"] == "pending")

One reader thread reads every line in the order the daemon wrote it and
sorts it: answers to the waiting caller, events to a queue that keeps
their order.
"""

import json
import os
import queue
import socket
import threading

MAX_LINE = 1 << 20


class ControlError(Exception):
    """A refused request: code is the daemon's error code."""

    def __init__(self, op, code, message, data=None):
        super().__init__(f"{op}: {code}: {message}")
        self.op, self.code, self.message, self.data = op, code, message, data


class ConnectionEnded(Exception):
    """The daemon closed the connection (or refused it: not_permitted)."""


def socket_path():
    """The daemon's default socket: $XDG_RUNTIME_DIR/octosup/control.sock,
    else $TMPDIR/octosup-$UID/control.sock."""
    run = os.environ.get("XDG_RUNTIME_DIR")
    if run:
        return os.path.join(run, "octosup", "control.sock")
    tmp = os.environ.get("TMPDIR", "/tmp")
    return os.path.join(tmp, f"octosup-{os.getuid()}", "control.sock")


class Connection:
    """One control connection: many requests in flight, events in order."""

    def __init__(self, path, timeout=30.0):
        self.timeout = timeout
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path)
        self._file = self._sock.makefile("rb")
        self._wlock = threading.Lock()
        self._lock = threading.Lock()
        self._next = 0
        self._pending = {}  # id -> queue for its one answer
        self._events = queue.Queue()
        self._ended = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._reader.join(timeout=5)

    def _read(self):
        why = "the daemon closed the connection"
        try:
            for raw in self._file:
                line = json.loads(raw)
                if "event" in line:
                    self._events.put(line)
                    continue
                if line.get("id") is None:
                    # About the connection itself: it ends.
                    err = line.get("error") or {}
                    why = f"{err.get('code')}: {err.get('message')}"
                    break
                with self._lock:
                    waiter = self._pending.pop(line["id"], None)
                if waiter is not None:
                    waiter.put(line)
        except (OSError, ValueError) as e:
            why = f"read: {e}"
        with self._lock:
            self._ended = why
            waiters = list(self._pending.values())
            self._pending.clear()
        for w in waiters:
            w.put(None)
        self._events.put(None)

    def send(self, op, args=None):
        """Sends a request and returns a function that waits for its
        answer's data (raising ControlError on a refusal)."""
        with self._lock:
            if self._ended:
                raise ConnectionEnded(self._ended)
            self._next += 1
            rid = self._next
            waiter = queue.Queue(maxsize=1)
            self._pending[rid] = waiter
        req = {"id": rid, "op": op}
        if args is not None:
            req["args"] = args
        line = json.dumps(req, separators=(",", ":")).encode() + b"\n"
        if len(line) > MAX_LINE:
            raise ValueError(f"{op}: the request is over {MAX_LINE} bytes")
        with self._wlock:
            self._sock.sendall(line)

        def answer():
            try:
                resp = waiter.get(timeout=self.timeout)
            except queue.Empty:
                raise TimeoutError(f"{op}: no answer within {self.timeout}s") from None
            if resp is None:
                raise ConnectionEnded(f"{op}: {self._ended}")
            if not resp["ok"]:
                e = resp["error"]
                raise ControlError(op, e["code"], e["message"], e.get("data"))
            return resp.get("data")

        return answer

    def call(self, op, args=None):
        """Sends a request and returns its answer's data."""
        return self.send(op, args)()

    def next_event(self, timeout=None):
        ev = self._events.get(timeout=self.timeout if timeout is None else timeout)
        if ev is None:
            self._events.put(None)  # every later call sees the end too
            raise ConnectionEnded(self._ended)
        return ev

    def wait_event(self, name, match=lambda e: True, timeout=None):
        """Returns the next event called name that match accepts, dropping
        the others before it."""
        while True:
            ev = self.next_event(timeout)
            if ev["event"] == name and match(ev):
                return ev
