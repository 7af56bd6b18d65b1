"""The session with the UnrealCV plugin: how a client reaches it (our own connect and read timeouts), requests and
pipelined batches through the real ``unrealcv`` client, and the commands' number and reply formats. The backend
(:mod:`commonlink.synth.render.unrealcv`) and the preflight (:mod:`commonlink.synth.render.unreal_check`) both
talk to the plugin through :class:`UnrealCVConnection`.

Written against the plugin's ``Source/UnrealCV/Private/Server/UnixTcpServer.cpp`` (github.com/unrealcv/unrealcv,
branch ``5.2`` at ec120436, file last changed in 8c56df02), which every platform uses:

* The TCP listener (backlog 1) hands each accepted socket to ``OnClientConnected``, which serves it
  (``StartMessageServiceINet``, welcome ``connected to <project>``) until it disconnects, then calls
  ``StartMessageServiceUDS``. On Linux that unlinks and binds ``/tmp/unrealcv_{port}.socket`` and serves Unix
  socket clients one after another *forever*: the TCP listener's thread never returns, so every later TCP client
  is connected by the kernel (backlog) and never welcomed. Elsewhere it returns at once and the next TCP client
  is served. So on Linux each game run serves one TCP session; after it, only the Unix socket.
* The official client's ``unrealcv.api.UnrealCv_API.connect`` (mode ``"unix"``) does the same dance: connect over
  TCP, disconnect, then connect to the socket file. A socket file can be stale (left by an earlier game run that
  did not exit cleanly; the plugin unlinks it only in its destructor): connecting to it is refused.
* ``unrealcv.Client.connect(timeout=)`` ignores its timeout (client 1.3.2: blocking socket, no timeout), so a
  server that accepts and never answers would hang it forever. We therefore dial ourselves, with deadlines, read
  the welcome with the client's own framing (``unrealcv.SocketMessage``) and hand the socket to an
  ``unrealcv.Client`` for requests, with a read timeout on the socket.

Our rule (:func:`dial`): on the machine that runs Unreal, a socket file that accepts us is the session; a refused
one is stale and we use TCP; while TCP gives no welcome we keep looking for a (new) socket file until the connect
deadline, then say why nobody answered.
"""

from __future__ import annotations

import collections
import contextlib
import io
import ipaddress
import logging
import os
import queue
import re
import secrets
import select
import socket
import threading
import time
from collections.abc import Iterable, Sequence

import numpy as np
from PIL import Image

from commonlink.errors import BackendError, MissingDependencyError

UNIX_SOCKET_TEMPLATE = "/tmp/unrealcv_{port}.socket"  # UnixTcpServer.cpp StartMessageServiceUDS
_POLL_SECONDS = 0.1


def unix_socket_path(port: int) -> str:
    return UNIX_SOCKET_TEMPLATE.format(port=int(port))


class NoWelcome(Exception):
    """Connected, but the server sent no welcome before the deadline (another client's session, or a TCP client
    left in the backlog of a Linux game that now serves only its Unix socket)."""


class TimedSocket(socket.socket):
    """A socket that remembers whether a read timed out: the ``unrealcv`` client swallows the exception and
    reports a lost connection, and we want to say it was a timeout."""

    timed_out = False

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        try:
            return super().recv(bufsize, flags)
        except TimeoutError:
            self.timed_out = True
            raise


def is_local(host: str) -> bool:
    """Whether ``host`` is this machine (only then can its Unix socket be ours)."""
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def _welcome(sock: TimedSocket, deadline: float) -> bytes:
    """Wait for the plugin's ``connected to <project>`` until ``deadline``; raises :class:`NoWelcome` or
    ``ConnectionError`` (closed, or not the UnrealCV protocol)."""
    from unrealcv import SocketMessage

    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise NoWelcome()
        readable, _, _ = select.select([sock], [], [], min(left, _POLL_SECONDS))
        if readable:
            break
    sock.settimeout(max(left, 0.05))
    message = SocketMessage.ReceivePayload(sock)
    if message is None or not message.startswith(b"connected"):
        raise ConnectionError(f"the server closed the connection or did not speak UnrealCV (got {message!r:.60})")
    return message


def _open(family: int, address, deadline: float) -> TimedSocket:
    sock = TimedSocket(family, socket.SOCK_STREAM)
    try:
        if family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(max(deadline - time.monotonic(), 0.05))
        sock.connect(address)
        _welcome(sock, deadline)
    except BaseException:
        sock.close()
        raise
    return sock


def dial(host: str, port: int, connect_timeout: float) -> tuple[TimedSocket, str]:
    """A welcomed socket to the plugin and how it was reached (``"tcp"`` or ``"unix"``); raises
    :class:`BackendError` with the reason when no session could be had within ``connect_timeout`` seconds."""
    deadline = time.monotonic() + connect_timeout
    path = unix_socket_path(port)
    local = hasattr(socket, "AF_UNIX") and is_local(host)
    stale = False
    if local and os.path.exists(path):
        try:
            return _open(socket.AF_UNIX, path, deadline), "unix"
        except (ConnectionRefusedError, FileNotFoundError):
            stale = True  # left by an earlier game run: this one may still be in its TCP session
        except (NoWelcome, TimeoutError, BlockingIOError):  # BlockingIOError: its backlog is full
            raise _busy(host, port, f"its Unix socket {path} accepted us but sent no welcome") from None
    try:
        sock = TimedSocket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(max(deadline - time.monotonic(), 0.05))
        sock.connect((host, int(port)))
    except TimeoutError:
        sock.close()
        raise _busy(host, port, f"the TCP connection was not accepted within {connect_timeout:g} s") from None
    except OSError as exc:
        sock.close()
        raise BackendError(
            f"Could not connect to UnrealCV at {host}:{port} ({exc.strerror or exc}): nothing is listening there.",
            "Open the project in Unreal Editor 5.2-5.5 with the UnrealCV plugin (branch 5.2) and press Play; the port "
            "is 9000 unless unrealcv.ini or -cvport says otherwise (docs/unreal.md). Or pass --host/--port.",
        ) from None
    try:
        while True:
            slice_end = min(deadline, time.monotonic() + _POLL_SECONDS)
            try:
                _welcome(sock, slice_end)
                return sock, "tcp"
            except NoWelcome:
                pass
            # No welcome yet: on Linux the game may serve only its Unix socket now (after an earlier session).
            if local and os.path.exists(path):  # a refused (stale) file costs nothing to try again
                try:
                    unix = _open(socket.AF_UNIX, path, min(deadline, time.monotonic() + 1.0))
                    sock.close()
                    return unix, "unix"
                except (ConnectionRefusedError, FileNotFoundError):
                    stale = True
                except (NoWelcome, TimeoutError, BlockingIOError):
                    pass  # another client holds the Unix socket's session; keep waiting on both
            if time.monotonic() >= deadline:
                break
    except BaseException:
        sock.close()
        raise
    sock.close()
    where = (
        f"and {path} is {'stale' if stale else 'not there'}"
        if local
        else "and its Unix socket is on the Unreal machine, out of reach from here"
    )
    raise _busy(
        host, port, f"the TCP connection was accepted but no welcome came within {connect_timeout:g} s, {where}"
    )


#: What of an ``unrealcv.Client`` a session uses beyond its public methods: it drives the client's own receive thread
#: and request queues (what ``request_batch`` does, in pipelined chunks with a timeout; unrealcv 1.3.2).
CLIENT_INTERNALS = ("receive_loop_queue", "send", "send_message_id", "recv_num_q", "recv_data_q")


def require_client_internals(client, sock) -> None:
    """A clear error (``sock`` closed) for a client that lacks what a session drives, not an AttributeError later."""
    missing = [a for a in CLIENT_INTERNALS if not hasattr(client, a)]
    if missing:
        sock.close()
        import unrealcv

        raise BackendError(
            f"This unrealcv client ({getattr(unrealcv, '__version__', 'unknown version')}) lacks {', '.join(missing)}, "
            "which commonlink's UnrealCV session uses (tested with unrealcv 1.3.2).",
            "Install a current client: pip install -U unrealcv",
        )


def _busy(host: str, port: int, what: str) -> BackendError:
    return BackendError(
        f"UnrealCV at {host}:{port} did not start a session: {what}. Either another client is connected (the plugin "
        "serves one at a time), or the game runs on Linux and has already served its one TCP session (after it the "
        f"plugin serves only the Unix socket {unix_socket_path(port)}, on the machine that runs Unreal).",
        "Close other UnrealCV clients; run commonlink on the machine that runs Unreal (it then uses the Unix socket), "
        "or restart Play; raise --connect-timeout if Unreal is just slow to answer (docs/unreal.md).",
    )


#: Prefix of every actor commonlink spawns (renders and the preflight), so leftovers of a dropped connection can be
#: found and removed.
NAME_PREFIX = "cl_"

_COLOR_RE = re.compile(r"R=(\d+),\s*G=(\d+),\s*B=(\d+)(?:,\s*A=(\d+))?")
#: Commands per chunk of a batch (the plugin runs ``MaxRequestsPerTick`` = 32 per frame).
BATCH_CHUNK = 32
#: Chunks sent and not yet answered: two keep the plugin's queue from running dry between frames.
CHUNKS_IN_FLIGHT = 2


def _quiet_client_receive_thread() -> None:
    """The client's receive thread dies with a ConnectionError (or socket timeout) traceback when the server drops
    the socket or stops answering; the backend handles that (reconnect, redo the scene), so hide those tracebacks
    and keep all others."""
    previous = threading.excepthook
    if getattr(previous, "_commonlink_quiet", False):
        return

    def hook(args):
        if issubclass(args.exc_type, OSError) and args.thread is not None and "receive_loop_queue" in args.thread.name:
            return
        previous(args)

    hook._commonlink_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class UnrealCVCommandError(BackendError):
    """The Unreal side answered ``error ...`` to a command."""

    def __init__(self, command: str, reply: str, fix: str | None = None):
        super().__init__(
            f"UnrealCV answered {reply!r} to the command {command!r}.",
            fix
            or "Run `commonlink unreal check --assets FILE` to see which classes the project lacks, and check that "
            "the UnrealCV plugin is the 5.2 branch (1.0.x).",
        )
        self.command = command
        self.reply = reply


def fmt_floats(values) -> str:
    # The plugin's [float] pattern is [-+]?\d*[.]?\d+ (Server/CommandDispatcher.cpp): no exponents.
    return " ".join(f"{float(v):.4f}" for v in values)


def parse_color(reply: str) -> tuple[int, int, int] | None:
    """``"(R=12,G=34,B=56,A=255)"`` -> (12, 34, 56); an unset colour (alpha 0: no annotation yet) -> None."""
    match = _COLOR_RE.search(reply)
    if not match:
        raise BackendError(
            f"Unexpected reply to a colour query: {reply!r}.", "Use the UnrealCV plugin's 5.2 branch (1.0.x)."
        )
    r, g, b, a = match.groups()
    if a is not None and int(a) == 0:
        return None
    return int(r), int(g), int(b)


def parse_vector(reply: str) -> tuple[float, float, float]:
    try:
        x, y, z = (float(v) for v in str(reply).split()[:3])
    except ValueError:
        raise BackendError(
            f"Unexpected reply to a location query: {reply!r}.", "Use the UnrealCV plugin's 5.2 branch (1.0.x)."
        ) from None
    return x, y, z


def decode_png(data, what: str) -> np.ndarray:
    if not isinstance(data, (bytes, bytearray)) or not bytes(data[:8]) == b"\x89PNG\r\n\x1a\n":
        raise BackendError(
            f"UnrealCV did not send a PNG for {what} (got {str(data)[:80]!r}).",
            "Check the camera id and plugin version.",
        )
    return np.asarray(Image.open(io.BytesIO(bytes(data))).convert("RGB"))


def choose_palette(count: int, avoid: Iterable[Sequence[int]], min_distance: int) -> list[tuple[int, int, int]]:
    """``count`` mask colours, each at least ``min_distance`` (largest channel difference) from the others, from
    black and from every colour in ``avoid`` (the level's); chosen farthest-first so they spread out. Dark
    colours (every channel below 64) are never used. Deterministic for the same inputs."""
    levels = np.arange(64, 256, 16)  # 64..240
    candidates = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1).reshape(-1, 3).astype(np.int32)
    blockers = np.array([[0, 0, 0], *[tuple(c)[:3] for c in avoid]], dtype=np.int32)
    nearest = np.full(len(candidates), 1 << 16, dtype=np.int32)
    for start in range(0, len(blockers), 512):  # chunked: big levels have thousands of colours
        chunk = blockers[start : start + 512]
        nearest = np.minimum(nearest, np.abs(candidates[:, None, :] - chunk[None, :, :]).max(axis=2).min(axis=1))
    chosen: list[tuple[int, int, int]] = []
    for _ in range(count):
        best = int(np.argmax(nearest))
        if nearest[best] < min_distance:
            raise BackendError(
                f"Cannot choose {count} object mask colours at least {min_distance} apart from each other and from the "
                f"{len(blockers) - 1} colours the level's actors already have (found {len(chosen)}).",
                "Use a level with fewer actors (the plugin gives each level actor its own colour when Play starts).",
            )
        color = candidates[best]
        chosen.append((int(color[0]), int(color[1]), int(color[2])))
        nearest = np.minimum(nearest, np.abs(candidates - color).max(axis=1))
    return chosen


class UnrealCVConnection:
    """One session with the plugin through the real ``unrealcv`` client: dialled by :func:`dial` (TCP, or the Unix
    socket a Linux game serves after its first TCP session; our connect deadline), a read timeout on the socket,
    single requests, batches with a timeout, and error replies turned into :class:`UnrealCVCommandError`. One
    instance serves a whole command (preflight and renders); :meth:`open` again after a drop starts a new session."""

    def __init__(self, host: str, port: int, timeout: float = 60.0, connect_timeout: float = 10.0):
        self.host, self.port, self.timeout, self.connect_timeout = host, int(port), timeout, connect_timeout
        self._client = None
        self._sock = None
        self.transport: str | None = None  #: "tcp" or "unix" for the open session
        self.sessions = 0  #: sessions opened so far (a drop and :meth:`open` make a new one)
        self.round_trips = 0  #: requests and batches sent, each waited for before the next: a frame or more each

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.isconnected()

    def open(self) -> None:
        try:
            import unrealcv
        except ImportError as exc:
            raise MissingDependencyError("unrealcv", "render", "--backend unrealcv") from exc
        logging.getLogger("unrealcv").setLevel(logging.CRITICAL)
        _quiet_client_receive_thread()
        sock, transport = dial(self.host, self.port, self.connect_timeout)
        endpoint = unix_socket_path(self.port) if transport == "unix" else (self.host, self.port)
        client = unrealcv.Client(endpoint, "unix" if transport == "unix" else "inet")
        require_client_internals(client, sock)
        # The client's own retry loop sleeps ~1 min on a dead socket; we reconnect and redo the scene instead.
        client.RECONNECT_ATTEMPTS = 0
        # What Client.connect does after the welcome (its connect has no working timeout, see the module doc).
        # The capability probe it would send (`vget /unrealcv/commands`) exists in no plugin branch: skipped.
        sock.settimeout(self.timeout)
        client.sock = sock
        client.t = threading.Thread(target=client.receive_loop_queue, name="unrealcv-receive_loop_queue", daemon=True)
        client.t.start()
        self._client, self._sock, self.transport = client, sock, transport
        self.sessions += 1

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
                client.disconnect()

    def _lost(self, what: str) -> Exception:
        """The error for a reply that never came: a timeout when the socket timed out, else a lost connection."""
        if self._sock is not None and self._sock.timed_out:
            return TimeoutError(f"no reply within {self.timeout:g} s to {what} (UnrealCV at {self.host}:{self.port})")
        return ConnectionError(f"connection lost waiting for the reply to {what}")

    @staticmethod
    def check(command: str, reply):
        if reply is None:
            raise ConnectionError(f"no reply to {command!r}")
        if isinstance(reply, str) and reply.startswith("error"):
            raise UnrealCVCommandError(command, reply)
        return reply

    def request(self, command: str):
        if self._client is None:
            raise ConnectionError("not connected")
        self.round_trips += 1
        try:
            reply = self._client.request(command, timeout=self.timeout)
        except ConnectionError:
            raise self._lost(repr(command)) from None
        except TimeoutError:  # the client's own wait on its reply queue
            raise TimeoutError(
                f"no reply within {self.timeout:g} s to {command!r} (UnrealCV at {self.host}:{self.port})"
            ) from None
        if reply is None:
            raise self._lost(repr(command))
        return self.check(command, reply)

    def batch(self, commands: list[str], *, check: bool = True) -> list:
        """Send commands back to back and return their replies (one round trip); ``check=False`` returns error
        replies as they are.

        Pipelined in chunks of :data:`BATCH_CHUNK` (the plugin's requests per frame), :data:`CHUNKS_IN_FLIGHT`
        unanswered at most: the next chunk is queued before the plugin's frame takes the current one, so n commands
        cost ceil(n / 32) frames, while the client's receive thread reads each chunk's replies as they come. Sent
        at once (``request_batch`` sends every request before it reads a reply), hundreds of commands fill the
        socket buffers (soonest on a Unix socket: a small message costs a full buffer slot), both sides block, and
        the plugin's Unix socket writer drops a reply after 1 s of retries (``WrapAndSendPayloadUDS``)."""
        client = self._client
        if client is None:
            raise ConnectionError("not connected")
        self.round_trips += bool(commands)
        replies: list = []
        in_flight: collections.deque[list[str]] = collections.deque()
        for start in range(0, len(commands), BATCH_CHUNK):
            if len(in_flight) == CHUNKS_IN_FLIGHT:
                replies += self._collect(client, in_flight.popleft())
            chunk = commands[start : start + BATCH_CHUNK]
            self._send_chunk(client, chunk)
            in_flight.append(chunk)
        while in_flight:
            replies += self._collect(client, in_flight.popleft())
        return [self.check(c, r) for c, r in zip(commands, replies)] if check else replies

    def _send_chunk(self, client, commands: list[str]) -> None:
        """Send without waiting; the client's receive thread keeps the replies (``request_batch``'s first half)."""
        for command in commands:
            if not client.send(b"%d:%s" % (client.send_message_id, command.encode("utf-8"))):
                raise self._lost(f"a batch of {len(commands)} commands (first: {commands[0]!r})")
            client.send_message_id += 1
        client.recv_num_q.put(-len(commands))

    def _collect(self, client, commands: list[str]) -> list:
        """The replies to a chunk sent by :meth:`_send_chunk`, within ``timeout`` seconds (else the session ends)."""
        what = f"a batch of {len(commands)} commands (first: {commands[0]!r})"
        deadline = time.monotonic() + self.timeout
        replies = []
        for _ in commands:
            try:
                reply = client.recv_data_q.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                self.close()  # late replies would be taken for the next commands'
                raise TimeoutError(
                    f"no reply within {self.timeout:g} s to {what} (UnrealCV at {self.host}:{self.port})"
                ) from None
            if reply is None or isinstance(reply, Exception):  # the receive thread lost the connection
                raise self._lost(what)
            replies.append(reply)
        return replies

    def require_playing(self) -> list[str]:
        """The sensor names of ``vget /cameras``; none means the game is not running (no pawn, no game world)."""
        reply = str(self.request("vget /cameras")).strip()
        # An empty list is an OK status with no body, which the plugin sends as "ok" (Server/ExecStatus.cpp).
        cameras = [] if reply == "ok" else reply.split()
        if not cameras:
            raise BackendError(
                f"Unreal at {self.host}:{self.port} answers but is not playing: it has no cameras (camera 0 is the "
                "player pawn, which exists only after Play, and the plugin colours the level for object masks when "
                "Play starts).",
                "Press Play in the Unreal Editor (or start the packaged game) and rerun.",
            )
        return cameras

    def annotation_colors(self, names: Sequence[str]) -> dict[str, tuple[int, int, int]]:
        """{actor: its object mask colour}, read in one batch; actors without one (no mesh component, or spawned
        after Play and not coloured yet) and actors already gone are left out."""
        replies = self.batch([f"vget /object/{n}/color" for n in names], check=False)
        colors = {name: parse_color(str(reply)) for name, reply in zip(names, replies) if not is_error(reply)}
        return {name: color for name, color in colors.items() if color is not None}

    def spawn_camera(self, name: str, on_spawned=None) -> tuple[str, int]:
        """``vset /cameras/spawn``, renamed to ``name`` when the plugin allows; returns (actor name, camera id).

        The spawn answers the *actor* name, while ids index ``vget /cameras``, whose spawned sensors are all named
        ``FusionCameraSensor`` (``Actor/FusionCameraActor.cpp``) in the engine's object order: put the actor at a
        marker location nothing else has and look for the camera there. ``on_spawned(name)`` is called at once
        with every name the actor has, so a caller can clean it up whatever fails next.
        """
        actor = str(self.request("vset /cameras/spawn"))
        if on_spawned is not None:
            on_spawned(actor)
        if not is_error(self.batch([f"vset /object/{actor}/name {name}"], check=False)[0]):
            actor = name
            if on_spawned is not None:
                on_spawned(actor)
        marker = (-91234.5, 81234.25 + secrets.randbelow(1000), -71234.75)
        self.request(f"vset /object/{actor}/location {fmt_floats(marker)}")
        cameras = self.require_playing()
        ids = range(1, len(cameras))  # id 0 is the pawn's sensor (listed first by USensorBPLib::GetFusionSensorList)
        replies = self.batch([f"vget /camera/{i}/location" for i in ids], check=False)
        found = [
            i for i, r in zip(ids, replies) if not is_error(r) and np.allclose(parse_vector(str(r)), marker, atol=0.01)
        ]
        if len(found) != 1:
            raise BackendError(
                f"Spawned the camera {actor} but could not find its id among the {len(cameras)} cameras "
                "of `vget /cameras`.",
                "Use the UnrealCV plugin's 5.2 branch (1.0.x), whose `vset /cameras/spawn` spawns a FusionCameraActor.",
            )
        return actor, found[0]


def is_error(reply) -> bool:
    return isinstance(reply, str) and reply.startswith("error")
