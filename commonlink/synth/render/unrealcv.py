"""The UnrealCV backend: renders a scene plan in a running Unreal Engine 5 through the ``unrealcv`` client.

Written against the UnrealCV plugin's source (github.com/unrealcv/unrealcv, branch ``5.2``, plugin 1.0.1; paths
below under ``Source/UnrealCV/Private/``), which differs from what a first reading of its docs suggests:

* The plugin colours actors once, when Play starts (``Controller/WorldController.cpp`` InitWorld ->
  ``Controller/ObjectAnnotator.cpp`` AnnotateWorld), and the mask camera draws only coloured actors
  (``Sensor/CameraSensor/AnnotationCamSensor.cpp``). Actors we spawn later are therefore missing from
  ``object_mask`` until we colour them, and ``vget /object/X/color`` of an uncoloured actor answers an unset
  colour without an error. So on every connection we read the level actors' colours, choose a palette far from
  black and from them (:func:`choose_palette`), colour every actor we spawn with ``vset /object/X/color``, read
  the colours back, and match masks against our palette only. An object absent from every view's mask (with 3
  or more views) is an :class:`ObjectMissingFromMaskError`, never a silently relabelled image.
* Camera 0 is the player pawn (``Commands/CameraHandler.cpp``, ``Sensor/CameraSensor/PawnCamSensor.cpp``):
  setting its location moves the pawn, its rotation goes through ``ClientSetRotation``, and the sensor copies the
  pawn's eyes once per frame. We never touch it: we spawn our own camera (``vset /cameras/spawn``, which answers
  the *actor* name) and find its id in ``vget /cameras`` by moving the actor to a marker location and reading
  every camera's location (sensor names are all ``FusionCameraSensor``, and a freed slot is reused).
* ``vset /objects/spawn`` only finds classes already loaded (``Commands/ObjectHandler.cpp``), spawns at the
  origin, answers the actor's name and silently keeps the automatic ``<Class>_<n>`` name when the rename fails;
  renaming onto an existing name can crash Unreal (comment in ``SetName``). Our names are unique per backend, per
  connection and per render attempt; we use the name the plugin answers, remember it until the actor is
  destroyed, and a reconnect removes every actor we spawned: our ``cl_`` names, names we were given, and
  automatic names of our classes that were not in the level when we first connected.
* At most 32 requests run per frame (``Server/UnrealcvServer.cpp``): commands go in pipelined batches, and a scene
  takes two (the spawns, then everything else), so its frames are the fewest the 32 per frame allow.

A dropped connection reconnects, removes what the broken attempt left behind and redoes the scene.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import queue
import re
import secrets
import threading
import time
from collections.abc import Iterable, Sequence

import numpy as np
from PIL import Image

from commonlink.errors import BackendError, MissingDependencyError
from commonlink.synth.assets import AssetCatalog
from commonlink.synth.plan import ScenePlan
from commonlink.synth.render.base import RenderedView
from commonlink.synth.render.unrealcv_transport import dial, require_client_internals, unix_socket_path
from commonlink.synth.visibility import instance_ids_from_colors, object_pixel_counts

#: Prefix of every actor this backend spawns, so leftovers of a dropped connection can be found and removed.
NAME_PREFIX = "cl_"
#: With this many views or more, an object absent from every view's mask means it was not drawn in the mask.
MIN_VIEWS_FOR_ABSENCE_CHECK = 3
_COLOR_RE = re.compile(r"R=(\d+),\s*G=(\d+),\s*B=(\d+)(?:,\s*A=(\d+))?")
#: Commands per chunk of a batch (the plugin runs ``MaxRequestsPerTick`` = 32 per frame).
BATCH_CHUNK = 32
#: Chunks sent and not yet answered: two keep the plugin's queue from running dry between frames.
CHUNKS_IN_FLIGHT = 2
_CONNECTION_ERRORS = (ConnectionError, TimeoutError, OSError, AssertionError)  # AssertionError: reply ids out of step


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


class ObjectMissingFromMaskError(BackendError):
    """A planned object never appeared in any view's object mask: its labels would be wrong."""


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
    """One session with the plugin through the real ``unrealcv`` client: dialled by
    :func:`~commonlink.synth.render.unrealcv_transport.dial` (TCP, or the Unix socket a Linux game serves after its
    first TCP session; our connect deadline), a read timeout on the socket, single requests, batches with a
    timeout, and error replies turned into :class:`UnrealCVCommandError`. One instance serves a whole command
    (preflight and renders); :meth:`open` again after a drop starts a new session."""

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
        # What Client.connect does after the welcome (its connect has no working timeout, see unrealcv_transport).
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


class UnrealCVBackend:
    """Render plans on ``host:port``; keeps one connection (and one spawned camera) open across scenes."""

    def __init__(
        self,
        host: str,
        port: int,
        catalog: AssetCatalog,
        *,
        width: int,
        height: int,
        mask_tolerance: int = 3,
        reconnect_attempts: int = 3,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        connection: UnrealCVConnection | None = None,
    ):
        self.host, self.port, self.catalog = host, int(port), catalog
        self.width, self.height = width, height
        self.mask_tolerance, self.reconnect_attempts, self.timeout = mask_tolerance, reconnect_attempts, timeout
        #: Palette colours stay this far (largest channel difference) from each other and from level colours: both
        #: sides of a pair may drift by the matching tolerance, so keep well over twice it (at least 24 levels).
        self.min_color_distance = max(24, 4 * mask_tolerance + 8)
        #: Shared with the preflight (``connection``) so that a command uses one session: a Linux game serves one
        #: TCP session per run, and every reconnect costs a set-up.
        self._conn = connection or UnrealCVConnection(host, port, timeout, connect_timeout)
        self._ready_session: int | None = None  #: the connection session our set-up (camera, colours) belongs to
        self._token = secrets.token_hex(3)  # names unique per backend: never reuse another run's (destroyed) names
        self._session = 0
        self._renders = 0
        self._baseline: set[str] | None = None  #: actor names in the level when we first connected
        self._owned: set[str] = set()  #: names the plugin gave our spawns and that are not destroyed yet
        # A class given by path (/Game/Props/BP_Mug.BP_Mug_C) names its actors after its short name (BP_Mug_C_0).
        short = {c.rsplit("/", 1)[-1].rsplit(".", 1)[-1] for c in catalog.by_ue_class()}
        classes = "|".join([re.escape(c) for c in sorted(short)] + ["FusionCameraActor"])
        self._auto_name = re.compile(rf"^(?:{classes})_\d+$")
        self.level_colors: dict[str, tuple[int, int, int]] = {}
        self.palette: list[tuple[int, int, int]] = []
        self.camera_actor: str | None = None
        self.camera_id: int | None = None
        self.reconnects = 0  #: connections re-opened after a drop (for logs and tests)
        self.renamed: list[tuple[str, str]] = []  #: (name asked for, name the plugin kept) when a rename failed

    # -- connection ---------------------------------------------------------------------------------------
    @property
    def connection(self) -> UnrealCVConnection:
        return self._conn

    @property
    def ready(self) -> bool:
        return self._conn.connected and self._ready_session == self._conn.sessions

    def _connect(self) -> None:
        if not self._conn.connected:
            self._conn.open()
        self._session += 1
        try:
            self._set_up()
        except BaseException:
            self._conn.close()  # half set up (no camera yet): the next render starts from a fresh connection
            raise
        self._ready_session = self._conn.sessions

    def _set_up(self) -> None:
        self._conn.require_playing()
        names = str(self._conn.request("vget /objects")).split()
        if self._baseline is None:
            self._baseline = {n for n in names if not n.startswith(NAME_PREFIX)}
        leftovers = [n for n in names if self._is_ours(n)]
        self._destroy(leftovers)
        gone = set(leftovers)
        self.level_colors = self._conn.annotation_colors([n for n in names if n not in gone])
        self.palette = []
        self._spawn_camera()

    def _is_ours(self, name: str) -> bool:
        if name.startswith(NAME_PREFIX) or name in self._owned:
            return True
        # A spawn whose reply was lost and whose rename failed keeps an automatic name: not in the level before.
        return self._baseline is not None and name not in self._baseline and bool(self._auto_name.match(name))

    def _destroy(self, names: Sequence[str]) -> None:
        names = list(dict.fromkeys(names))
        self._forget_destroyed(names, self._conn.batch([f"vset /object/{n}/destroy" for n in names], check=False))

    def _forget_destroyed(self, names: Sequence[str], replies: Sequence) -> None:  # destroyed, or gone already
        for name, reply in zip(names, replies):
            if not is_error(reply) or "Cannot find object" in str(reply):
                self._owned.discard(name)

    def _spawn_camera(self) -> None:
        """Spawn our own camera and find its id (the pawn's camera 0 is never moved)."""
        wanted = f"{NAME_PREFIX}{self._token}_{self._session}_camera"
        self.camera_actor, self.camera_id = self._conn.spawn_camera(wanted, on_spawned=self._owned.add)
        self._owned.add(self.camera_actor)
        self._conn.request(f"vset /camera/{self.camera_id}/size {self.width} {self.height}")

    def open(self) -> None:
        """Connect and set up (level colours, our camera) now instead of at the first render."""
        if not self.ready:
            self._connect()

    def close(self) -> None:
        if self._conn.connected:
            with contextlib.suppress(*_CONNECTION_ERRORS, BackendError):
                self._destroy(sorted(self._owned))
        self._conn.close()

    def palette_for(self, count: int) -> list[tuple[int, int, int]]:
        if len(self.palette) < count:
            self.palette = choose_palette(max(count, 17), self.level_colors.values(), self.min_color_distance)
        return self.palette[:count]

    # -- rendering ----------------------------------------------------------------------------------------
    def render(self, plan: ScenePlan) -> list[RenderedView]:
        if tuple(plan.resolution) != (self.width, self.height):
            raise BackendError(
                f"Plan resolution {plan.resolution} differs from the backend's {self.width}x{self.height}."
            )
        last: Exception | None = None
        for attempt in range(self.reconnect_attempts + 1):
            try:
                if not self.ready:
                    if attempt or last is not None:
                        self.reconnects += 1
                    self._connect()
                return self._render_once(plan)
            except _CONNECTION_ERRORS as exc:
                last = exc
                self._conn.close()
        raise BackendError(
            f"Lost the UnrealCV connection to {self.host}:{self.port} {self.reconnect_attempts + 1} times while "
            f"rendering scene {plan.scene_id} ({type(last).__name__}: {last}).",
            "Check that Unreal is still running; rerun the same command to resume from the last finished scene.",
        )

    def _spawn(self, classes: list[str], names: list[str]) -> list[str]:
        """Spawn in one batch; returns the names the plugin gave (remembered at once, for cleanup)."""
        commands = [f"vset /objects/spawn {c} {n}" for c, n in zip(classes, names)]
        replies = self._conn.batch(commands, check=False)
        actual, failure = [], None
        for command, wanted, reply in zip(commands, names, replies):
            if is_error(reply):
                failure = failure or (command, str(reply))
                continue
            name = str(reply).strip()
            self._owned.add(name)
            actual.append(name)
            if name != wanted:
                # SetActorName failed (another object has that name): the plugin keeps the automatic name.
                self.renamed.append((wanted, name))
        if failure is not None:
            self._destroy(actual)
            raise UnrealCVCommandError(*failure)
        return actual

    def _render_once(self, plan: ScenePlan) -> list[RenderedView]:
        self._renders += 1
        tag = f"{NAME_PREFIX}{self._token}_{self._session}_{plan.scene_id}_{self._renders}"
        floor = self.catalog.floor(plan.floor.material)
        classes = [o.ue_class for o in plan.objects] + [floor.ue_class]
        spawned = self._spawn(classes, [f"{tag}_{k}" for k in range(len(plan.objects))] + [f"{tag}_floor"])
        try:
            names = spawned[:-1]
            colors = self.palette_for(len(spawned))
            # All that follows the spawns (whose names it needs) is one batch, run in order: poses, colours and
            # their read-back, each view's pose and captures, the destroys. None of it waits on an earlier reply, so
            # a scene costs 2 round trips and 1 + ceil(n / 32) frames; replies are checked after (the plugin runs
            # every command whatever an earlier one answered).
            setup = self._setup_commands(plan, spawned, colors)
            readback = [f"vget /object/{n}/color" for n in spawned]
            shots = self._shot_commands(plan)
            destroys = [f"vset /object/{n}/destroy" for n in spawned]
            commands = setup + readback + shots + destroys
            replies = self._conn.batch(commands, check=False)
            self._forget_destroyed(spawned, replies[-len(destroys) :])
            head = len(setup) + len(readback)
            for command, reply in zip(commands[:head], replies):
                self._conn.check(command, reply)
            self._check_colors(spawned, classes, colors, replies[len(setup) : head])
            captures = [self._conn.check(c, r) for c, r in zip(shots, replies[head:])]
            views, object_colors = [], colors[: len(names)]
            for lit, mask in zip(captures[3::5], captures[4::5]):  # each view: pose, rotation, fov, lit, mask
                ids = instance_ids_from_colors(decode_png(mask, "object_mask"), object_colors, self.mask_tolerance)
                views.append(RenderedView(rgb=decode_png(lit, "lit"), instance=ids))
            self._check_every_object_drawn(plan, names, views)
            return views
        finally:
            left = [n for n in spawned if n in self._owned]
            if left and self._conn.connected:
                # Best effort: a failure here must not hide the original error; leftovers are removed on reconnect.
                with contextlib.suppress(*_CONNECTION_ERRORS, BackendError):
                    self._destroy(left)

    @staticmethod
    def _setup_commands(plan: ScenePlan, spawned: list[str], colors: list[tuple[int, int, int]]) -> list[str]:
        """Place the floor and the objects and give every actor its mask colour."""
        setup = [f"vset /object/{spawned[-1]}/location 0.0000 0.0000 0.0000"]
        for name, obj in zip(spawned[:-1], plan.objects):
            setup += [
                f"vset /object/{name}/location {fmt_floats(obj.location)}",
                f"vset /object/{name}/rotation {fmt_floats(obj.rotation)}",
                f"vset /object/{name}/scale {fmt_floats([obj.scale] * 3)}",
            ]
        return setup + [f"vset /object/{n}/color {r} {g} {b}" for n, (r, g, b) in zip(spawned, colors)]

    def _shot_commands(self, plan: ScenePlan) -> list[str]:
        """Per view our camera's pose and fov, then the captures (a spawned camera moves at once, so a capture in
        the same frame as its pose sees that pose)."""
        cam = f"/camera/{self.camera_id}"
        shots = []
        for camera in plan.cameras:
            shots += [
                f"vset {cam}/location {fmt_floats(camera.location)}",
                f"vset {cam}/rotation {fmt_floats(camera.rotation)}",
                f"vset {cam}/fov {camera.fov:.4f}",
                f"vget {cam}/lit png",
                f"vget {cam}/object_mask png",
            ]
        return shots

    @staticmethod
    def _check_colors(spawned, classes, colors, replies) -> None:
        for name, cls, color, reply in zip(spawned, classes, colors, replies):
            if parse_color(str(reply)) != color:
                raise BackendError(
                    f"The actor {name} (class {cls}) did not take its object mask colour {color} (reads "
                    f"{reply!r}): the plugin only colours mesh components, so it would be missing from every "
                    "object mask.",
                    "Give the Blueprint a StaticMeshComponent (the editor tool tools/unreal/commonlink_import.py "
                    "does).",
                )

    def _check_every_object_drawn(self, plan: ScenePlan, names: list[str], views: list[RenderedView]) -> None:
        if len(views) < MIN_VIEWS_FOR_ABSENCE_CHECK:
            return  # one or two views can legitimately hide an object behind others
        seen = sum(object_pixel_counts(view.instance, len(names)) for view in views)
        missing = [
            f"{o.name} ({name}, class {o.ue_class})"
            for o, name, pixels in zip(plan.objects, names, seen)
            if pixels == 0
        ]
        if missing:
            raise ObjectMissingFromMaskError(
                f"Scene {plan.scene_id}: {', '.join(missing)} appear in no view's object mask although the cameras "
                f"frame them ({len(views)} views): their labels would be wrong.",
                "Check that the class's Blueprint has a visible StaticMeshComponent (not hidden in game) and that "
                "`commonlink unreal check` passes; the plugin draws only coloured mesh components in masks.",
            )
