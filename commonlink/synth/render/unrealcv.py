"""The UnrealCV backend: renders a scene plan in a running Unreal Engine 5 through the ``unrealcv`` client.

Written against the UnrealCV plugin's source (github.com/unrealcv/unrealcv, branch ``5.2``, plugin 1.0.1; paths
below under ``Source/UnrealCV/Private/``), which differs from what a first reading of its docs suggests:

* The plugin colours actors once, when Play starts (``Controller/WorldController.cpp`` InitWorld ->
  ``Controller/ObjectAnnotator.cpp`` AnnotateWorld), and the mask camera draws only coloured actors
  (``Sensor/CameraSensor/AnnotationCamSensor.cpp``). Actors we spawn later are therefore missing from
  ``object_mask`` until we colour them, and ``vget /object/X/color`` of an uncoloured actor answers an unset
  colour without an error. So on every connection we read the level actors' colours, choose a palette far from
  black and from them (:func:`~commonlink.synth.render.unrealcv_transport.choose_palette`), colour every actor
  we spawn with ``vset /object/X/color``, read the colours back, and match masks against our palette only. An
  object absent from every view's mask (with 3 or more views) is an :class:`ObjectMissingFromMaskError`, never a
  silently relabelled image.
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

A dropped connection reconnects, removes what the broken attempt left behind and redoes the scene. The session
with the plugin (dialling, requests, pipelined batches, reply formats) is
:mod:`commonlink.synth.render.unrealcv_transport`; :class:`UnrealCVSettings` opens the backend for ``synth``.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from commonlink.errors import BackendError, InputError
from commonlink.synth.assets import AssetCatalog
from commonlink.synth.plan import ScenePlan
from commonlink.synth.render.base import RenderedView, RendererSettings
from commonlink.synth.render.unreal_check import refuse_placeholder_classes, require_project_ready
from commonlink.synth.render.unrealcv_transport import (
    NAME_PREFIX,
    UnrealCVCommandError,
    UnrealCVConnection,
    choose_palette,
    decode_png,
    fmt_floats,
    is_error,
    parse_color,
)
from commonlink.synth.visibility import instance_ids_from_colors, object_pixel_counts

#: With this many views or more, an object absent from every view's mask means it was not drawn in the mask.
MIN_VIEWS_FOR_ABSENCE_CHECK = 3
_CONNECTION_ERRORS = (ConnectionError, TimeoutError, OSError, AssertionError)  # AssertionError: reply ids out of step


class ObjectMissingFromMaskError(BackendError):
    """A planned object never appeared in any view's object mask: its labels would be wrong."""


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


@dataclass
class UnrealCVSettings(RendererSettings):
    """How ``commonlink synth --backend unrealcv`` reaches the game and reads its masks; :meth:`open` runs the
    preflight (:func:`~commonlink.synth.render.unreal_check.require_project_ready`) on the session it renders on."""

    name: ClassVar[str] = "unrealcv"
    host: str = "127.0.0.1"
    port: int = 9000
    timeout: float = 60.0  #: seconds to wait for a reply (does not change the output)
    connect_timeout: float = 10.0  #: seconds to wait for a session to start
    mask_tolerance: int = 3  #: colour tolerance when reading Unreal object masks

    def __post_init__(self) -> None:
        for option, value in (("--timeout", self.timeout), ("--connect-timeout", self.connect_timeout)):
            if not value >= 0.1:
                raise InputError(f"{option} {value}: must be at least 0.1 seconds.", f"e.g. {option} 10.")
        if self.mask_tolerance < 0:
            raise InputError(
                f"mask_tolerance {self.mask_tolerance}: must be >= 0 colour levels.", "e.g. 3 (the default)."
            )

    def content(self) -> dict:
        """The settings that change the output (the address and the timeouts do not)."""
        return {"mask_tolerance": self.mask_tolerance}

    def check_assets(self, catalog: AssetCatalog) -> None:
        refuse_placeholder_classes(catalog)

    def check_processes(self, workers: int, executor: str) -> None:
        if workers > 1 or executor != "local":
            raise InputError(
                "The UnrealCV plugin serves one client at a time, so --backend unrealcv runs in one process.",
                "Drop --workers/--executor ray, or start several Unreal instances and give each a --shard I/N "
                "and its --port.",
            )

    def open(self, catalog: AssetCatalog, width: int, height: int) -> UnrealCVBackend:
        backend = UnrealCVBackend(
            self.host,
            self.port,
            catalog,
            width=width,
            height=height,
            mask_tolerance=self.mask_tolerance,
            timeout=self.timeout,
            connect_timeout=self.connect_timeout,
        )
        # Refuse placeholder classes, then every class the game lacks (all at once), before rendering anything; on
        # the session the renders then use (a Linux game serves one TCP session per run).
        try:
            require_project_ready(self.host, self.port, catalog, connection=backend.connection)
        except BaseException:
            backend.close()
            raise
        return backend
