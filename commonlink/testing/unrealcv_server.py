"""A local stand-in for Unreal Engine + the UnrealCV plugin, speaking UnrealCV's TCP wire protocol.

Unreal cannot run on CPU-only CI machines, so the UnrealCV backend is tested end-to-end against this server with
the real ``unrealcv`` client. It follows the plugin's ``TcpServer.cpp``: every message both ways is
``uint32 magic 0x9E2B83C1, uint32 payload size`` (little-endian) and the payload; on accept it sends
``connected to <project>``; it serves one client at a time (others are accepted and closed at once); requests
are ``"<id>:<command>"`` and replies ``"<id>:<body>"`` with ``ok``, a value, ``error <message>`` or raw PNG bytes;
a bad magic or an empty payload closes the connection. It implements the commands the backend uses (spawn,
destroy, location, rotation, scale, bounds, annotation colour, cameras, ``lit png`` and ``object_mask png``) and
keeps its world across connections, like a running game. Rendering uses the offline renderer: object classes
are looked up in the asset file by ``ue_class``.

Fault injection for tests: :meth:`FakeUnrealCVServer.drop_connection_on` closes the socket instead of replying
to a matching command; :meth:`FakeUnrealCVServer.error_on` answers ``error ...``.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import select
import socket
import struct
import threading
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from commonlink.synth.assets import Asset, AssetCatalog, FloorMaterial, load_assets
from commonlink.synth.plan import CameraPose, Lighting
from commonlink.synth.render.offline import OfflineRenderer, Placement

MAGIC = 0x9E2B83C1
_HEADER = struct.Struct("<II")

#: Command templates this server understands (returned by ``vget /unrealcv/commands``; the client checks
#: commands against them).
COMMANDS = (
    "vget /unrealcv/commands",
    "vget /unrealcv/status",
    "vget /unrealcv/version",
    "vget /objects",
    "vset /objects/spawn [str]",
    "vset /objects/spawn [str] [str]",
    "vset /object/[str]/destroy",
    "vget /object/[str]/location",
    "vset /object/[str]/location [float] [float] [float]",
    "vget /object/[str]/rotation",
    "vset /object/[str]/rotation [float] [float] [float]",
    "vget /object/[str]/scale",
    "vset /object/[str]/scale [float] [float] [float]",
    "vget /object/[str]/bounds",
    "vget /object/[str]/color",
    "vset /object/[str]/color [uint] [uint] [uint]",
    "vget /object/[str]/uclass_name",
    "vset /object/[str]/hide",
    "vset /object/[str]/show",
    "vget /cameras",
    "vset /cameras/spawn",
    "vget /camera/[uint]/location",
    "vset /camera/[uint]/location [float] [float] [float]",
    "vget /camera/[uint]/rotation",
    "vset /camera/[uint]/rotation [float] [float] [float]",
    "vget /camera/[uint]/fov",
    "vset /camera/[uint]/fov [float]",
    "vset /camera/[uint]/size [uint] [uint]",
    "vget /camera/[uint]/lit png",
    "vget /camera/[uint]/object_mask png",
)


def _annotation_colors():
    """Well-separated mask colours (like the plugin's colour table): a 4-level RGB grid, never black."""
    levels = (48, 112, 176, 240)
    return [c for c in itertools.product(levels, repeat=3)]


@dataclass
class _Actor:
    name: str
    uclass: str
    asset: Asset | FloorMaterial
    color: tuple[int, int, int]
    location: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    rotation: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    scale: list[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])
    hidden: bool = False


@dataclass
class _Camera:
    location: list[float] = field(default_factory=lambda: [-300.0, 0.0, 200.0])
    rotation: list[float] = field(default_factory=lambda: [-30.0, 0.0, 0.0])
    fov: float = 90.0
    size: tuple[int, int] = (640, 480)


class _Drop(Exception):
    """Internal: close the client connection without replying."""


def _f(value: float) -> str:
    return f"{value:.3f}"


class FakeUnrealCVServer:
    """A threaded UnrealCV-protocol server on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        catalog: AssetCatalog | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        project: str = "CommonlinkTestWorld",
        mask_jitter: int = 2,
        lighting: Lighting | None = None,
    ):
        self.catalog = catalog or load_assets()
        self.project, self.mask_jitter = project, mask_jitter
        self.lighting = lighting or Lighting()
        self._classes = self.catalog.by_ue_class()
        self._listener = socket.create_server((host, port))
        self.host, self.port = self._listener.getsockname()[:2]
        self.actors: dict[str, _Actor] = {}
        self.cameras: list[_Camera] = [_Camera()]
        self._color_pool = _annotation_colors()
        self._spawn_counter = itertools.count()
        self._drops: list[list] = []  # [substring, remaining count]
        self._errors: list[list] = []  # [substring, message, remaining count]
        self._stalls: list[list] = []  # [substring, remaining count]
        self._stalled = False  # the current connection hangs: nothing more is answered on it
        self._renderers: dict[tuple[int, int], object] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.connections = 0
        self.rejected = 0
        self.requests = 0
        self.log: list[str] = []  #: every command received, in order

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

    # -- network ------------------------------------------------------------------------------------------
    def _serve(self) -> None:
        client: socket.socket | None = None
        buffer = b""
        try:
            while not self._stop.is_set():
                watch = [self._listener] + ([client] if client else [])
                readable, _, _ = select.select(watch, [], [], 0.05)
                if self._listener in readable:
                    conn, _ = self._listener.accept()
                    if client is None:
                        client, buffer, self._stalled = conn, b"", False
                        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        self.connections += 1
                        self._send(client, f"connected to {self.project}".encode())
                    else:  # one client at a time, like the plugin
                        self.rejected += 1
                        conn.close()
                if client is not None and client in readable:
                    chunk = client.recv(1 << 16)
                    if not chunk:
                        client.close()
                        client = None
                        continue
                    buffer += chunk
                    try:
                        buffer = self._handle_buffer(client, buffer)
                    except (_Drop, OSError):
                        with contextlib.suppress(OSError):
                            client.shutdown(socket.SHUT_RDWR)
                        client.close()
                        client = None
        finally:
            if client is not None:
                client.close()
            for renderer in self._renderers.values():
                renderer.close()  # type: ignore[attr-defined]
            self._renderers.clear()

    def _handle_buffer(self, client: socket.socket, buffer: bytes) -> bytes:
        while len(buffer) >= _HEADER.size:
            magic, size = _HEADER.unpack_from(buffer)
            if magic != MAGIC or size == 0:  # the plugin closes the connection on a malformed header
                raise _Drop()
            if len(buffer) < _HEADER.size + size:
                break
            payload = buffer[_HEADER.size : _HEADER.size + size]
            buffer = buffer[_HEADER.size + size :]
            request_id, sep, command = payload.partition(b":")
            if not sep or not request_id.isdigit():
                continue  # not a request: the plugin logs and ignores it
            if self._stalled or self._stalls_on(command.decode("utf-8", errors="replace")):
                self._stalled = True
                continue
            body = self.execute(command.decode("utf-8", errors="replace"))
            self._send(client, request_id + b":" + body)
        return buffer

    @staticmethod
    def _send(client: socket.socket, payload: bytes) -> None:
        client.sendall(_HEADER.pack(MAGIC, len(payload)) + payload)

    def _stalls_on(self, command: str) -> bool:
        for rule in self._stalls:
            if rule[1] > 0 and rule[0] in command:
                rule[1] -= 1
                return True
        return False

    # -- commands -----------------------------------------------------------------------------------------
    def execute(self, command: str) -> bytes:
        """Run one command and return the reply body."""
        self.requests += 1
        self.log.append(command)
        for rule in self._drops:
            if rule[1] > 0 and rule[0] in command:
                rule[1] -= 1
                raise _Drop()
        for rule in self._errors:
            if rule[2] > 0 and rule[0] in command:
                rule[2] -= 1
                return f"error {rule[1]}".encode()
        try:
            reply = self._dispatch(command.split())
        except _CommandError as exc:
            return f"error {exc}".encode()
        if reply is None:
            return f"error Can not find a handler for URI '{command}'".encode()
        return reply if isinstance(reply, bytes) else reply.encode()

    def _actor(self, name: str) -> _Actor:
        if name not in self.actors:
            raise _CommandError("Can not find object")
        return self.actors[name]

    def _camera(self, cam_id: str) -> _Camera:
        if not cam_id.isdigit() or int(cam_id) >= len(self.cameras):
            raise _CommandError(f"Camera {cam_id} can not be found.")
        return self.cameras[int(cam_id)]

    def _dispatch(self, words: list[str]):  # noqa: C901 - one branch per command, like the plugin's table
        if len(words) < 2 or words[0] not in ("vget", "vset"):
            return None
        verb, path, args = words[0], words[1], words[2:]
        parts = path.strip("/").split("/")
        if verb == "vget" and path == "/unrealcv/commands":
            return "\n".join(COMMANDS)
        if verb == "vget" and path == "/unrealcv/status":
            return f"Is Listening\nClient Connected\n{self.port}"
        if verb == "vget" and path == "/unrealcv/version":
            return "v1.1.0"
        if verb == "vget" and path == "/objects":
            return " ".join(self.actors)
        if verb == "vset" and path == "/objects/spawn" and len(args) in (1, 2):
            return self._spawn(args[0], args[1] if len(args) == 2 else None)
        if parts[0] == "object" and len(parts) == 3:
            return self._object_command(verb, parts[1], parts[2], args)
        if verb == "vget" and path == "/cameras":
            return " ".join(f"Camera{i}" for i in range(len(self.cameras)))
        if verb == "vset" and path == "/cameras/spawn":
            self.cameras.append(_Camera())
            return f"Camera{len(self.cameras) - 1}"
        if parts[0] == "camera" and len(parts) == 3:
            return self._camera_command(verb, parts[1], parts[2], args)
        return None

    def _spawn(self, uclass: str, name: str | None) -> str:
        if name is not None and name in self.actors:
            raise _CommandError(f"Failed to spawn {name}, object exsit.")
        if uclass not in self._classes:
            raise _CommandError(f"Can not find a class with name '{uclass}'")
        counter = next(self._spawn_counter)
        name = name or f"{uclass}_{counter}"
        used = {a.color for a in self.actors.values()}
        free = [c for c in self._color_pool if c not in used]
        color = free[counter % len(free)] if free else self._color_pool[counter % len(self._color_pool)]
        self.actors[name] = _Actor(name=name, uclass=uclass, asset=self._classes[uclass], color=color)
        return name

    def _object_command(self, verb: str, name: str, prop: str, args: list[str]):
        actor = self._actor(name)
        if verb == "vset" and prop == "destroy" and not args:
            del self.actors[name]
            return "ok"
        if prop in ("location", "rotation", "scale"):
            return _vector_property(actor, prop, verb, args)
        if prop == "color":
            if verb == "vget" and not args:
                r, g, b = actor.color
                return f"(R={r},G={g},B={b},A=255)"
            if verb == "vset" and len(args) == 3:
                actor.color = tuple(int(v) for v in args)  # type: ignore[assignment]
                return "ok"
        if verb == "vget" and prop == "bounds" and not args:
            return " ".join(f"{v:.2f}" for v in self._bounds(actor))
        if verb == "vget" and prop == "uclass_name" and not args:
            return actor.uclass
        if verb == "vset" and prop in ("hide", "show") and not args:
            actor.hidden = prop == "hide"
            return "ok"
        return None

    def _bounds(self, actor: _Actor) -> list[float]:
        size = actor.asset.size_cm if isinstance(actor.asset, Asset) else (1600.0, 1600.0, 0.0)
        half = np.array([size[0] / 2, size[1] / 2, 0.0]) * actor.scale
        top = np.array([0.0, 0.0, size[2]]) * actor.scale
        lo = np.array(actor.location) - half
        hi = np.array(actor.location) + half + top
        return [*lo, *hi]

    def _camera_command(self, verb: str, cam_id: str, prop: str, args: list[str]):
        camera = self._camera(cam_id)
        if prop in ("location", "rotation"):
            return _vector_property(camera, prop, verb, args)
        if prop == "fov":
            if verb == "vget" and not args:
                return _f(camera.fov)
            if verb == "vset" and len(args) == 1:
                camera.fov = _floats(args)[0]
                return "ok"
            return None
        if prop == "size" and verb == "vset" and len(args) == 2 and all(a.isdigit() for a in args):
            camera.size = (int(args[0]), int(args[1]))
            return "ok"
        if verb == "vget" and prop in ("lit", "object_mask") and args == ["png"]:
            return self._capture(camera, mask=prop == "object_mask")
        return None

    # -- rendering ----------------------------------------------------------------------------------------
    def _renderer(self, size: tuple[int, int]):
        if size not in self._renderers:

            self._renderers[size] = OfflineRenderer(size[0], size[1], self.catalog)
        return self._renderers[size]

    def _capture(self, camera: _Camera, *, mask: bool) -> bytes:
        renderer = self._renderer(camera.size)
        visible = [a for a in self.actors.values() if not a.hidden]
        objects = [a for a in visible if isinstance(a.asset, Asset)]
        floors = [a for a in visible if isinstance(a.asset, FloorMaterial)]
        placements = [Placement(a.asset, tuple(a.location), tuple(a.rotation), tuple(a.scale)) for a in objects]  # type: ignore[arg-type]
        scene, nodes = renderer.build_scene(placements, floors[0].asset if floors else None, self.lighting)  # type: ignore[arg-type]
        pose = CameraPose(location=tuple(camera.location), rotation=tuple(camera.rotation), fov=camera.fov)  # type: ignore[arg-type]
        if not mask:
            rgb, _ = renderer.render_view(scene, nodes, pose, self.lighting)
            image = np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])
        else:
            _, seg = renderer.render_view(scene, nodes, pose, self.lighting, seg_colors=[a.color for a in objects])
            seg = seg[..., :3].astype(np.int16)
            if self.mask_jitter and objects:
                # Unreal's mask colours drift by a few levels; shift each object's pixels by a fixed small offset.
                rng = np.random.default_rng(len(self.log))
                for actor in objects:
                    hit = np.all(seg == np.array(actor.color), axis=2)
                    seg[hit] += rng.integers(-self.mask_jitter, self.mask_jitter + 1, size=3)
            image = np.dstack([np.clip(seg, 0, 255).astype(np.uint8), np.full(seg.shape[:2], 255, np.uint8)])
        buffer = io.BytesIO()
        Image.fromarray(image, mode="RGBA").save(buffer, format="PNG", compress_level=1)
        return buffer.getvalue()


class _CommandError(Exception):
    pass


def _vector_property(thing, prop: str, verb: str, args: list[str]):
    """``vget`` / ``vset`` of a 3-vector attribute (location, rotation, scale)."""
    if verb == "vget" and not args:
        return " ".join(_f(v) for v in getattr(thing, prop))
    if verb == "vset" and len(args) == 3:
        setattr(thing, prop, _floats(args))
        return "ok"
    return None


def _floats(args: list[str]) -> list[float]:
    try:
        return [float(a) for a in args]
    except ValueError:
        raise _CommandError(f"Invalid number in {' '.join(args)!r}") from None
