"""How a client reaches the UnrealCV plugin, with our own connect and read timeouts.

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

import ipaddress
import os
import select
import socket
import time

from commonlink.errors import BackendError

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
