"""A local stand-in for Unreal Engine 5 + the UnrealCV plugin (branch ``5.2``, plugin 1.0.1), speaking its TCP protocol.

Unreal cannot run on CPU-only CI machines, so the UnrealCV backend is tested end to end against this server with
the real ``unrealcv`` client. It models the plugin as its source reads (paths under ``Source/UnrealCV/Private/``
of github.com/unrealcv/unrealcv, branch 5.2), including what the plugin refuses or silently gets wrong:

* Wire protocol (``Server/UnixTcpServer.cpp``, ``Server/UnrealcvServer.cpp``): every message both ways is
  ``uint32 magic 0x9E2B83C1, uint32 payload size`` (little-endian) and the payload; on accept it sends
  ``connected to <project>``; one client at a time (others are rejected); requests ``"<id>:<command>"``, replies
  ``"<id>:<body>"`` with ``ok``, a value, ``error <message>`` or raw PNG bytes; a bad magic or an empty payload
  closes the connection; at most **32 requests are taken per frame** (``MaxRequestsPerTick``). ``vbatch N``
  (``ProcessPendingRequest``) answers ``ok`` at once and holds the next N requests until the last one has arrived,
  then runs them together in that frame. The id is read with ``FCString::Atoi`` and written back with ``%d``, and
  the message regex finds the first ``<digits>:`` anywhere in the payload; ``.`` stops at a line break.
* Dispatch (``Server/CommandDispatcher.cpp``): URI templates become regular expressions (``[str]`` = ``[^ ]*``,
  ``[uint]`` = ``\\d*``, ``[float]`` = ``[-+]?\\d*[.]?\\d+``: no exponents), tried newest first; an unmatched
  command answers ``error No handler found for URI '<command>'``. There is no ``vget /unrealcv/commands``
  (only ``vget /unrealcv/help``), so the client warns that the server is too old to list its commands.
* Objects (``Commands/ObjectHandler.cpp``): ``vset /objects/spawn`` looks the class up among classes already
  loaded in memory only (``FindFirstObjectSafe<UClass>``), spawns at the origin, and returns the actor's name;
  a name already used by a live actor is refused (``Failed to spawn X, object exists.``); renaming onto any
  other object's name (an asset, a class, an editor actor) fails inside ``SetActorName`` and the spawn silently
  keeps the automatic ``<Class>_<n>`` name. Unknown actors answer ``error Cannot find object``.
* Annotation (``Controller/WorldController.cpp`` InitWorld -> ``Controller/ObjectAnnotator.cpp`` AnnotateWorld):
  when Play starts, every actor of the level takes the next colour of the plugin's colour map (first entry
  black); actors with mesh components get an annotation component in that colour. Actors spawned later have
  none: ``vget /object/X/color`` answers an unset colour (``(R=0,G=0,B=0,A=0)``, no error) until
  ``vset /object/X/color R G B`` adds one. The mask camera draws only annotated components
  (``Sensor/CameraSensor/AnnotationCamSensor.cpp``, show-only list): uncoloured actors are absent from
  ``object_mask`` and hide nothing behind them.
* Cameras (``Commands/CameraHandler.cpp``, ``BPFunctionLib/SensorBPLib.cpp``,
  ``Sensor/CameraSensor/PawnCamSensor.cpp``, ``Actor/FusionCameraActor.cpp``): camera 0 is the player pawn's
  sensor and exists only after Play; setting its location moves the pawn, its rotation goes to the controller
  (``ClientSetRotation``), and the sensor copies the pawn's eye viewpoint (location + eye height) once per
  frame, so a capture in the same frame still shows the old pose. ``vset /cameras/spawn`` spawns a
  ``FusionCameraActor_<n>`` (640x480, fov 90 by default) and answers its *actor* name; ``vget /cameras``
  lists sensor names (``PawnSensor FusionCameraSensor FusionCameraSensor ...``), and a destroyed camera's slot
  is reused by the next one, so a new camera's id is not always the last.

What it does not model: lighting and materials are the offline renderer's, the floor is drawn in lit views
only (objects never go below it), and anti-aliased mask edges are modelled as a small colour offset per object.
Fault injection for tests: :meth:`FakeUnrealCVServer.drop_connection_on`, :meth:`stall_on`, :meth:`error_on`,
:meth:`fail_rename_on`.
"""

from __future__ import annotations

import contextlib
import io
import re
import select
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from commonlink.synth.assets import Asset, AssetCatalog, FloorMaterial, load_assets
from commonlink.synth.plan import CameraPose, Lighting, ue_rotation_matrix
from commonlink.synth.render.offline import OfflineRenderer, Placement

MAGIC = 0x9E2B83C1
_HEADER = struct.Struct("<II")
#: ``FUnrealcvServer::ProcessPendingRequest``: ``constexpr int32 MaxRequestsPerTick = 32``.
MAX_REQUESTS_PER_FRAME = 32
PLUGIN_VERSION = "1.0.1"  # UnrealCV.uplugin "VersionName" on branch 5.2
#: An FColor read without an annotation component: ``GetAnnotationColor`` returns early and leaves it unset.
UNSET_COLOR = "(R=0,G=0,B=0,A=0)"

# ``FCommandDispatcher::FCommandDispatcher``: the regular expression of each argument type.
_TYPE_REGEX = {"str": "([^ ]*)", "uint": "(\\d*)", "float": "([-+]?\\d*[.]?\\d+)"}


def plugin_color_map(count: int = 32 ** 3) -> list[tuple[int, int, int]]:
    """The plugin's annotation colour map (``FColorGenerator::GetColorFromColorMap``), index 0 first: black, then
    the saturated corners of the RGB cube, then ever finer subdivisions."""
    values = [0] * 256
    step, index = 256.0, 0
    while step >= 1:
        value = int(step - 1)
        while value <= 256:
            index += 1
            if index < 256:  # the C++ writes one past the end on the last pass
                values[index] = value
            value += int(step * 2)
        step /= 2
    colors: list[tuple[int, int, int]] = []
    for top in range(32):
        for fix in ((0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)):
            ranges = [range(1) if f else range(top) for f in fix]
            for i in ranges[0]:
                for j in ranges[1]:
                    for k in ranges[2]:
                        idx = [top if fix[0] else i, top if fix[1] else j, top if fix[2] else k]
                        colors.append((values[idx[0]], values[idx[1]], values[idx[2]]))
            if len(colors) >= count:
                return colors[:count]
    return colors


@dataclass
class _Camera:
    """A FusionCamSensor: its own film size, fov and world pose."""

    name: str
    location: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    rotation: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    fov: float = 90.0
    size: tuple[int, int] = (640, 480)


@dataclass
class _Actor:
    name: str
    uclass: str
    asset: Asset | FloorMaterial | None = None  #: None: no mesh component (lights, pawn, cameras, settings)
    color: tuple[int, int, int] | None = None  #: annotation component colour; None = not annotated
    location: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    rotation: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    scale: list[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])
    hidden: bool = False
    camera: _Camera | None = None  #: set for FusionCameraActor: the actor's pose is the sensor's pose


@dataclass
class LevelActor:
    """An actor placed in the level before Play (coloured by the plugin when the world starts)."""

    name: str
    ue_class: str  #: a class of the catalog (drawn with its mesh) or any other class name (no mesh)
    location: tuple[float, float, float] = (0.0, 0.0, 0.0)
    rotation: tuple[float, float, float] = (0.0, 0.0, 0.0)
    scale: float = 1.0
    hidden: bool = False


@dataclass
class ClassShape:
    """How a class really measures in the "project" when it differs from the asset file."""

    size_cm: tuple[float, float, float]
    pivot_offset_cm: tuple[float, float, float] = (0.0, 0.0, 0.0)  #: bounds-box bottom centre minus the pivot


class _Drop(Exception):
    """Internal: close the client connection without replying."""


class _Error(Exception):
    """Internal: answer ``error <message>``."""


def _vec(values) -> str:
    # FStrFormatter << FVector / FRotator (Utils/StrFormatter.h): "%.3f %.3f %.3f".
    return " ".join(f"{float(v):.3f}" for v in values)


def _color_text(color: tuple[int, int, int]) -> str:
    r, g, b = color
    return f"(R={r},G={g},B={b},A=255)"  # FColor::ToString


class FakeUnrealCVServer:
    """A threaded UnrealCV-protocol server on ``host:port`` (port 0 picks a free one).

    ``catalog`` gives the meshes of the classes the project has (``class_shapes`` overrides how some measure,
``hidden_classes`` have their mesh hidden in game); ``loaded_classes`` (default: every class in the
    catalog) are the ones in memory, the only ones ``vset /objects/spawn`` finds. ``level`` lists the level's
    actors (default: settings, lights, player start, the pawn); ``playing=False`` starts in the editor before
    Play (no pawn, no camera 0, nothing coloured) until :meth:`press_play`. ``frame_seconds`` > 0 makes each frame
    last that long (a real game runs at 30-120 frames per second). ``record_truth`` keeps, for every mask
    captured, which actor each pixel really shows (``mask_truth``) so tests can check labels exactly.
    """

    def __init__(
        self,
        catalog: AssetCatalog | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        project: str = "CommonlinkTestWorld",
        loaded_classes: set[str] | None = None,
        level: list[LevelActor] | None = None,
        class_shapes: dict[str, ClassShape] | None = None,
        hidden_classes: set[str] | None = None,
        playing: bool = True,
        frame_seconds: float = 0.0,
        pawn_eye_height: float = 64.0,
        mask_jitter: int = 2,
        lighting: Lighting | None = None,
        record_truth: bool = False,
    ):
        self.catalog = catalog or load_assets()
        self.project, self.mask_jitter, self.frame_seconds = project, mask_jitter, frame_seconds
        self.lighting = lighting or Lighting()
        self.pawn_eye_height, self.record_truth = pawn_eye_height, record_truth
        known = self.catalog.by_ue_class()
        self._classes = {c: known[c] for c in (loaded_classes if loaded_classes is not None else known) if c in known}
        self.class_shapes = dict(class_shapes or {})
        self.hidden_classes = set(hidden_classes or ())  #: Blueprints whose mesh is hidden in game
        # Names FindFirstObjectSafe<UObject> finds besides world actors: the loaded classes and their defaults.
        self.other_objects = set(self._classes) | {f"Default__{c}" for c in self._classes}
        self._listener = socket.create_server((host, port))
        self.host, self.port = self._listener.getsockname()[:2]
        self.actors: dict[str, _Actor] = {}
        self.sensors: list[_Camera | None] = []  #: spawned FusionCamSensors in object-hash order (None = free slot)
        self.pawn_sensor: _Camera | None = None
        self.controller_rotation = [0.0, 0.0, 0.0]
        self._class_counters: dict[str, int] = {}
        self._level = level if level is not None else default_level()
        self.playing = False
        self._build_level()
        if playing:
            self.press_play()
        self._drops: list[list] = []  # [substring, remaining count]
        self._errors: list[list] = []  # [substring, message, remaining count]
        self._stalls: list[list] = []  # [substring, remaining count]
        self._rename_failures: list[list] = []  # [substring, remaining count]
        self._stalled = False
        self._batch: list[tuple[bytes, str]] = []  #: requests held by ``vbatch N`` until the N-th arrives
        self._batch_left = 0
        self._renderers: dict[tuple[int, int], object] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._routes = self._register_commands()
        self.connections = 0
        self.rejected = 0
        self.requests = 0
        self.frames = 0
        self.max_requests_in_a_frame = 0
        self.log: list[str] = []  #: every command received, in order
        self.mask_truth: deque = deque(maxlen=64)  #: (names by id, id image) per object_mask capture
        self.mask_pixels: deque = deque(maxlen=64)  #: {actor name: pixels in the mask} per object_mask capture

    # -- the world ------------------------------------------------------------------------------------------
    def _build_level(self) -> None:
        known = self.catalog.by_ue_class()
        for actor in self._level:
            asset = known.get(actor.ue_class)
            self.actors[actor.name] = _Actor(
                name=actor.name, uclass=actor.ue_class, asset=asset, location=list(actor.location),
                rotation=list(actor.rotation), scale=[float(actor.scale)] * 3, hidden=actor.hidden,
            )

    def press_play(self) -> None:
        """Start the game world: the plugin colours every level actor (AnnotateWorld) and mounts the pawn sensor."""
        if self.playing:
            return
        self.playing = True
        colors = plugin_color_map(len(self.actors) + 1)
        for index, actor in enumerate(list(self.actors.values())):
            if actor.asset is not None:  # only actors with mesh components get an annotation component
                actor.color = colors[index]
        pawn = self.actors.get(PAWN_NAME)
        if pawn is not None:
            self.pawn_sensor = _Camera(name="PawnSensor")
            self._copy_pawn_pose()

    def level_colors(self) -> dict[str, tuple[int, int, int]]:
        return {a.name: a.color for a in self.actors.values() if a.color is not None}

    def set_level_color(self, name: str, color: tuple[int, int, int]) -> None:
        self.actors[name].color = tuple(color)  # type: ignore[assignment]

    def _copy_pawn_pose(self) -> None:
        # UPawnCamSensor::TickComponent: GetActorEyesViewPoint -> (location + eye height, controller rotation).
        pawn = self.actors.get(PAWN_NAME)
        if pawn is None or self.pawn_sensor is None:
            return
        self.pawn_sensor.location = [pawn.location[0], pawn.location[1], pawn.location[2] + self.pawn_eye_height]
        self.pawn_sensor.rotation = list(self.controller_rotation)

    def camera_list(self) -> list[_Camera]:
        """``USensorBPLib::GetFusionSensorList``: the pawn's sensor first, then the others in object-hash order."""
        if not self.playing:
            return [s for s in self.sensors if s is not None]
        first = [self.pawn_sensor] if self.pawn_sensor is not None else []
        return first + [s for s in self.sensors if s is not None]

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> FakeUnrealCVServer:
        self._thread = threading.Thread(target=self._serve, name="fake-unrealcv", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with contextlib.suppress(OSError):
            self._listener.close()

    def __enter__(self) -> FakeUnrealCVServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- fault injection ----------------------------------------------------------------------------------
    def drop_connection_on(self, substring: str, times: int = 1) -> None:
        """Close the connection (no reply) the next ``times`` times a command containing ``substring`` arrives."""
        self._drops.append([substring, times])

    def stall_on(self, substring: str, times: int = 1) -> None:
        """Hang like a frozen Unreal the next ``times`` times a command containing ``substring`` arrives: keep the
        connection open but answer nothing more on it (the next connection is served normally)."""
        self._stalls.append([substring, times])

    def error_on(self, substring: str, message: str = "Injected failure", times: int = 1) -> None:
        """Answer ``error <message>`` the next ``times`` times a command containing ``substring`` arrives."""
        self._errors.append([substring, message, times])

    def fail_rename_on(self, substring: str, times: int = 1) -> None:
        """Make ``SetActorName`` find another object with the new name (an asset, an editor actor) the next
        ``times`` times the name contains ``substring``: the spawn keeps its automatic name."""
        self._rename_failures.append([substring, times])

    # -- network ------------------------------------------------------------------------------------------
    def _serve(self) -> None:
        client: socket.socket | None = None
        buffer = b""
        pending: deque = deque()
        try:
            while not self._stop.is_set():
                watch = [self._listener] + ([client] if client else [])
                readable, _, _ = select.select(watch, [], [], 0.0 if pending else 0.02)
                if self._listener in readable:
                    conn, _ = self._listener.accept()
                    if client is None:
                        client, buffer, self._stalled = conn, b"", False
                        pending.clear()
                        self._batch, self._batch_left = [], 0
                        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        self.connections += 1
                        self._send(client, f"connected to {self.project}".encode())
                    else:  # UnixTcpServer: "Rejecting ... only one client allowed."
                        self.rejected += 1
                        conn.close()
                if client is not None and client in readable:
                    chunk = b""
                    with contextlib.suppress(OSError):
                        chunk = client.recv(1 << 16)
                    if not chunk:
                        client.close()
                        client, pending = None, deque()
                        continue
                    buffer += chunk
                    try:
                        buffer = self._parse(buffer, pending)
                    except _Drop:
                        self._close(client)
                        client = None
                        pending.clear()
                        continue
                frame_start = time.perf_counter()
                if client is not None and pending:
                    try:
                        self._run_frame(client, pending)
                    except (_Drop, OSError):
                        self._close(client)
                        client = None
                        pending.clear()
                self._end_frame()
                if self.frame_seconds > 0:
                    time.sleep(max(0.0, self.frame_seconds - (time.perf_counter() - frame_start)))
        finally:
            if client is not None:
                client.close()
            for renderer in self._renderers.values():
                renderer.close()  # type: ignore[attr-defined]
            self._renderers.clear()

    @staticmethod
    def _close(client: socket.socket) -> None:
        """Close the client socket; the caller forgets it (``client = None``)."""
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)
        client.close()

    def _parse(self, buffer: bytes, pending: deque) -> bytes:
        while len(buffer) >= _HEADER.size:
            magic, size = _HEADER.unpack_from(buffer)
            if magic != MAGIC or size == 0:  # the plugin closes the connection on a malformed header
                raise _Drop()
            if len(buffer) < _HEADER.size + size:
                break
            payload = buffer[_HEADER.size : _HEADER.size + size]
            buffer = buffer[_HEADER.size + size :]
            # FUnrealcvServer::MessageFormat with FRegexMatcher::FindNext: unanchored, and ICU's "." stops at a line break.
            match = re.search(rb"(\d{1,}):(.*)", payload)
            if match is None:
                continue  # "Malformed raw message": logged and ignored
            request_id = b"%d" % int(match.group(1))  # FCString::Atoi, written back with "%d:"
            pending.append((request_id, match.group(2).decode("utf-8", errors="replace")))
        return buffer

    def _run_frame(self, client: socket.socket, pending: deque) -> None:
        done = 0
        while pending and done < MAX_REQUESTS_PER_FRAME:
            request_id, command = pending.popleft()
            done += 1
            if command.startswith("vbatch"):  # answered at once; the next N requests wait for each other
                self._batch_left = _atoi(command.replace("vbatch", ""))
                self._send(client, request_id + b":ok")
                continue
            self._batch.append((request_id, command))
            self._batch_left = max(self._batch_left, 1) - 1
            if self._batch_left == 0:
                batch, self._batch = self._batch, []
                for held_id, held in batch:
                    if self._stalled or self._take(self._stalls, held):
                        self._stalled = True
                        continue
                    self._send(client, held_id + b":" + self.execute(held))
        self.max_requests_in_a_frame = max(self.max_requests_in_a_frame, done)

    def _end_frame(self) -> None:
        self.frames += 1
        self._copy_pawn_pose()

    @staticmethod
    def _send(client: socket.socket, payload: bytes) -> None:
        client.sendall(_HEADER.pack(MAGIC, len(payload)) + payload)

    @staticmethod
    def _take(rules: list[list], command: str) -> bool:
        for rule in rules:
            if rule[-1] > 0 and rule[0] in command:
                rule[-1] -= 1
                return True
        return False

    # -- dispatch -----------------------------------------------------------------------------------------
    def _register_commands(self) -> list[tuple[str, re.Pattern, object]]:
        """URI templates in the plugin's registration order (dispatcher, then Object, Plugin, Camera handlers)."""
        o, c = self._object_commands, self._camera_commands
        table = [
            ("vrun [str]", lambda a: _fail(f"Unrecognised alias '{a[0]}'")),
            ("vget /objects", lambda a: "".join(f"{n} " for n in self.actors)),
            ("vset /objects/spawn [str]", lambda a: self._spawn(a[0], None)),
            ("vset /objects/spawn [str] [str]", lambda a: self._spawn(a[0], a[1])),
            ("vget /object/[str]/location", o("get_location")),
            ("vset /object/[str]/location [float] [float] [float]", o("set_location")),
            ("vget /object/[str]/rotation", o("get_rotation")),
            ("vset /object/[str]/rotation [float] [float] [float]", o("set_rotation")),
            ("vget /object/[str]/color", o("get_color")),
            ("vset /object/[str]/color [uint] [uint] [uint]", o("set_color")),
            ("vset /object/[str]/show", o("show")),
            ("vset /object/[str]/hide", o("hide")),
            ("vset /object/[str]/destroy", o("destroy")),
            ("vget /object/[str]/uclass_name", o("uclass_name")),
            ("vset /object/[str]/name [str]", o("set_name")),
            ("vget /object/[str]/scale", o("get_scale")),
            ("vset /object/[str]/scale [float] [float] [float]", o("set_scale")),
            ("vget /object/[str]/bounds", o("bounds")),
            ("vget /unrealcv/status", lambda a: f"Is Listening\nClient Connected\n{self.port}\nConfiguration\n"),
            ("vget /unrealcv/help", lambda a: "".join(f"{t}\n\n" for t, _, _ in self._routes)),
            ("vget /unrealcv/echo [str]", lambda a: a[0]),
            ("vget /unrealcv/version", lambda a: PLUGIN_VERSION),
            ("vget /scene/name", lambda a: self.project),
            ("vget /level/name", lambda a: "CommonlinkTestLevel"),
            ("vget /cameras", lambda a: "".join(f"{s.name} " for s in self.camera_list())),
            ("vset /cameras/spawn", lambda a: self._spawn_camera()),
            ("vget /camera/[uint]/location", c("get_location")),
            ("vset /camera/[uint]/location [float] [float] [float]", c("set_location")),
            ("vget /camera/[uint]/rotation", c("get_rotation")),
            ("vset /camera/[uint]/rotation [float] [float] [float]", c("set_rotation")),
            ("vget /camera/[uint]/lit [str]", c("lit")),
            ("vget /camera/[uint]/object_mask [str]", c("object_mask")),
            ("vget /camera/[uint]/seg [str]", c("object_mask")),
            ("vget /camera/[uint]/fov", c("get_fov")),
            ("vset /camera/[uint]/fov [float]", c("set_fov")),
            ("vset /camera/[uint]/size [uint] [uint]", c("set_size")),
            ("vget /camera/[uint]/size", c("get_size")),
        ]
        routes = []
        for template, handler in table:
            regex = re.sub(r"\[(\w+)\]", lambda m: _TYPE_REGEX[m.group(1)], re.escape(template).replace(r"\[", "[").replace(r"\]", "]"))
            routes.append((template, re.compile(regex + "[ ]*$"), handler))
        return routes

    def execute(self, command: str) -> bytes:
        """Run one command and return the reply body (``FCommandDispatcher::Exec`` + ``FExecStatus``)."""
        self.requests += 1
        self.log.append(command)
        if self._take(self._drops, command):
            raise _Drop()
        for rule in self._errors:
            if rule[2] > 0 and rule[0] in command:
                rule[2] -= 1
                return f"error {rule[1]}".encode()
        verb = command.split(" ", 1)[0]
        for template, pattern, handler in reversed(self._routes):
            if template.split(" ", 1)[0] != verb:
                continue
            match = pattern.search(command)
            if match is None:
                continue
            try:
                reply = handler(list(match.groups()))  # type: ignore[operator]
            except _Error as exc:
                return f"error {exc}".encode()
            if isinstance(reply, bytes):
                return reply
            return (reply or "ok").encode()
        return f"error No handler found for URI '{command}'".encode()

    # -- objects (Commands/ObjectHandler.cpp) ----------------------------------------------------------------
    def _spawn(self, uclass: str, name: str | None) -> str:
        if name is not None and name in self.actors:
            raise _Error(f"Failed to spawn {name}, object exists.")
        if uclass not in self._classes:
            raise _Error(f"Can not find a class with name '{uclass}'")
        auto = self._unique_name(uclass)  # MakeUniqueObjectName: <Class>_<n>
        actor = _Actor(name=auto, uclass=uclass, asset=self._classes[uclass], hidden=uclass in self.hidden_classes)  # at the origin, not annotated
        self.actors[auto] = actor
        if name is not None:
            with contextlib.suppress(_Error):  # Spawn ignores SetActorName's status
                self._set_actor_name(actor, name)
        return actor.name

    def _unique_name(self, uclass: str) -> str:
        while True:
            counter = self._class_counters.get(uclass, 0)
            self._class_counters[uclass] = counter + 1
            name = f"{uclass}_{counter}"
            if name not in self.actors:
                return name

    def _set_actor_name(self, actor: _Actor, new_name: str) -> str:
        if new_name == actor.name:
            return "The name has already been set"
        if new_name in self.actors or new_name in self.other_objects or self._take(self._rename_failures, new_name):
            raise _Error(f"Renaming an object to overwrite an existing object is not allowed: {new_name}")
        del self.actors[actor.name]
        actor.name = new_name
        self.actors[new_name] = actor
        return "ok"

    def _spawn_camera(self) -> str:
        camera = _Camera(name="FusionCameraSensor")
        actor = _Actor(name=self._unique_name("FusionCameraActor"), uclass="FusionCameraActor", camera=camera)
        camera.location, camera.rotation = actor.location, actor.rotation  # the sensor is the root component
        self.actors[actor.name] = actor
        free = [i for i, s in enumerate(self.sensors) if s is None]
        if free:
            self.sensors[free[0]] = camera  # a freed hash slot is reused: the new id is not always the last
        else:
            self.sensors.append(camera)
        return actor.name

    def _object_commands(self, op: str):
        def run(args: list[str]):
            actor = self.actors.get(args[0])
            if actor is None:
                raise _Error("Cannot find object")
            values = args[1:]
            if op == "get_location":
                return _vec(actor.location)
            if op == "set_location":
                actor.location[:] = _atof(values)  # the pawn's sensor follows at the end of the frame
                return "ok"
            if op == "get_rotation":
                return _vec(actor.rotation)
            if op == "set_rotation":
                actor.rotation[:] = _atof(values)
                return "ok"
            if op == "get_scale":
                return _vec(actor.scale)
            if op == "set_scale":
                actor.scale[:] = _atof(values)
                return "ok"
            if op == "get_color":
                return _color_text(actor.color) if actor.color is not None else UNSET_COLOR
            if op == "set_color":
                if actor.asset is not None:  # ObjectAnnotator: components are made for mesh components only
                    actor.color = tuple(int(v or 0) % 256 for v in values)  # type: ignore[assignment]
                return "ok"
            if op in ("show", "hide"):
                actor.hidden = op == "hide"
                return "ok"
            if op == "destroy":
                del self.actors[actor.name]
                if actor.camera is not None:
                    self.sensors[self.sensors.index(actor.camera)] = None
                return "ok"
            if op == "uclass_name":
                return actor.uclass
            if op == "set_name":
                return self._set_actor_name(actor, values[0])
            if op == "bounds":
                return " ".join(f"{v:.2f}" for v in self._bounds(actor))
            raise AssertionError(op)

        return run

    def _shape(self, actor: _Actor) -> ClassShape:
        if actor.uclass in self.class_shapes:
            return self.class_shapes[actor.uclass]
        if isinstance(actor.asset, Asset):
            return ClassShape(actor.asset.size_cm)
        if isinstance(actor.asset, FloorMaterial):
            return ClassShape((1600.0, 1600.0, 1.0), (0.0, 0.0, -1.0))
        return ClassShape((0.0, 0.0, 0.0))

    def _bounds(self, actor: _Actor) -> list[float]:
        """``AActor::GetActorBounds``: the world axis-aligned box of the rotated, scaled mesh."""
        shape = self._shape(actor)
        sx, sy, sz = shape.size_cm
        ox, oy, oz = shape.pivot_offset_cm
        corners = np.array([[x, y, z] for x in (-sx / 2, sx / 2) for y in (-sy / 2, sy / 2) for z in (0.0, sz)])
        corners = (corners + [ox, oy, oz]) * np.asarray(actor.scale)
        world = corners @ ue_rotation_matrix(*actor.rotation).T + np.asarray(actor.location)
        return [*world.min(axis=0), *world.max(axis=0)]

    # -- cameras (Commands/CameraHandler.cpp) -----------------------------------------------------------------
    def _camera_commands(self, op: str):
        def run(args: list[str]):
            cameras = self.camera_list()
            index = int(args[0] or 0)  # FCString::Atoi
            if not 0 <= index < len(cameras):
                # GetFOV/SetFOV/GetSize/SetSize return InvalidArgument instead of GetCamera's status.
                raise _Error("Argument Invalid" if op in ("get_fov", "set_fov", "get_size", "set_size") else "Invalid sensor id")
            camera = cameras[index]
            pawn = camera is self.pawn_sensor
            values = args[1:]
            if op == "get_location":
                return _vec(camera.location)
            if op == "get_rotation":
                return _vec(camera.rotation)
            if op == "set_location":
                if pawn:  # moves the pawn (SetActorLocation); the sensor copies its eyes next frame
                    self.actors[PAWN_NAME].location[:] = _atof(values)
                else:
                    camera.location[:] = _atof(values)
                return "ok"
            if op == "set_rotation":
                if pawn:  # Controller->ClientSetRotation; the sensor copies the view rotation next frame
                    self.controller_rotation = _atof(values)
                else:
                    camera.rotation[:] = _atof(values)
                return "ok"
            if op == "get_fov":
                return f"{camera.fov:f}"
            if op == "set_fov":
                camera.fov = _atof(values)[0]
                return "ok"
            if op == "get_size":
                return f"{camera.size[0]} {camera.size[1]}"
            if op == "set_size":
                camera.size = (int(values[0] or 0), int(values[1] or 0))
                return "ok"
            if values[0] == "png":
                return self._capture(camera, mask=op == "object_mask")
            return _fail(f"Invalid filename type, filename {values[0]}")

        return run

    # -- rendering ----------------------------------------------------------------------------------------
    def _renderer(self, size: tuple[int, int]):
        if size not in self._renderers:
            self._renderers[size] = OfflineRenderer(size[0], size[1], self.catalog)
        return self._renderers[size]

    def _capture(self, camera: _Camera, *, mask: bool) -> bytes:
        renderer = self._renderer(camera.size)
        visible = [a for a in self.actors.values() if not a.hidden and a.asset is not None]
        objects = [a for a in visible if isinstance(a.asset, Asset)]
        floors = [a for a in visible if isinstance(a.asset, FloorMaterial)]
        floor = floors[0].asset if floors else None
        pose = CameraPose(location=tuple(camera.location), rotation=tuple(camera.rotation), fov=camera.fov)  # type: ignore[arg-type]

        def placements(actors):
            return [Placement(a.asset, tuple(a.location), tuple(a.rotation), tuple(a.scale)) for a in actors]  # type: ignore[arg-type]

        if not mask:
            scene, nodes = renderer.build_scene(placements(objects), floor, self.lighting)  # type: ignore[arg-type]
            rgb, _ = renderer.render_view(scene, nodes, pose, self.lighting)
            image = np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])
        else:
            # AnnotationCamSensor: PRM_UseShowOnlyList with the annotation components: uncoloured actors are absent.
            coloured = [a for a in objects if a.color is not None]
            scene, nodes = renderer.build_scene(placements(coloured), floor, self.lighting)  # type: ignore[arg-type]
            _, seg = renderer.render_view(scene, nodes, pose, self.lighting, seg_colors=[a.color for a in coloured])
            seg = seg[..., :3].astype(np.int16)
            self.mask_pixels.append({a.name: int(np.all(seg == np.array(a.color), axis=2).sum()) for a in coloured})
            if self.mask_jitter and coloured:
                # Float round trips shift colours by a level or two: a fixed offset per colour (actors sharing a
                # colour stay identical, as they would in Unreal).
                rng = np.random.default_rng(len(self.log))
                hits = [np.all(seg == np.array(c), axis=2) for c in dict.fromkeys(a.color for a in coloured)]
                for hit in hits:
                    seg[hit] += rng.integers(-self.mask_jitter, self.mask_jitter + 1, size=3)
            image = np.dstack([np.clip(seg, 0, 255).astype(np.uint8), np.full(seg.shape[:2], 255, np.uint8)])
            if self.record_truth:
                # What the lit view shows at each pixel: every mesh actor, coloured or not.
                scene, nodes = renderer.build_scene(placements(objects), floor, self.lighting)  # type: ignore[arg-type]
                ids = [((k + 1) & 255, (k + 1) >> 8, 0) for k in range(len(objects))]
                _, truth = renderer.render_view(scene, nodes, pose, self.lighting, seg_colors=ids)
                self.mask_truth.append(([a.name for a in objects], truth[..., 0].astype(np.int32) + 256 * truth[..., 1].astype(np.int32)))
        buffer = io.BytesIO()
        Image.fromarray(image, mode="RGBA").save(buffer, format="PNG", compress_level=1)
        return buffer.getvalue()


#: The pawn's actor name in the default level.
PAWN_NAME = "DefaultPawn_0"


def default_level() -> list[LevelActor]:
    """A minimal level in the order the plugin iterates it: settings (the black colour), lights, start, pawn."""
    return [
        LevelActor("WorldSettings", "WorldSettings"),
        LevelActor("DirectionalLight_0", "DirectionalLight"),
        LevelActor("SkyLight_0", "SkyLight"),
        LevelActor("PlayerStart_0", "PlayerStart", (-400.0, 0.0, 100.0)),
        LevelActor(PAWN_NAME, "DefaultPawn", (-400.0, 0.0, 100.0)),
        LevelActor("UnrealcvWorldController_0", "UnrealcvWorldController"),
    ]


def _atoi(text: str) -> int:
    """``FCString::Atoi``: leading blanks, an optional sign, the digits that follow; 0 when there are none."""
    match = re.match(r"\s*([-+]?\d+)", text)
    return int(match.group(1)) if match else 0


def _atof(values: list[str]) -> list[float]:
    return [float(v) for v in values]  # the [float] regex only lets plain decimals through


def _fail(message: str):
    raise _Error(message)
