"""The UnrealCV backend: renders a scene plan in a running Unreal Engine through the ``unrealcv`` client.

Per scene: spawn the floor and every object by the Unreal class the asset file names
(``vset /objects/spawn <Class> <name>``), set location, rotation and scale, read each object's mask colour
(``vget /object/<name>/color``), then per camera set location/rotation/fov and capture ``lit png`` and
``object_mask png``. Mask colours are matched with a tolerance (Unreal's are not exact). Everything spawned is
destroyed after the scene. An ``error ...`` reply raises :class:`UnrealCVCommandError` naming the command; a
dropped connection reconnects, removes what the broken attempt left behind, and redoes the scene.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import threading
import time

import numpy as np
from PIL import Image

from commonlink.errors import BackendError, MissingDependencyError
from commonlink.synth.assets import AssetCatalog
from commonlink.synth.plan import ScenePlan
from commonlink.synth.render.offline import RenderedView
from commonlink.synth.visibility import instance_ids_from_colors

#: Prefix of every actor this backend spawns, so leftovers of a dropped connection can be found and removed.
NAME_PREFIX = "cl_"
_COLOR_RE = re.compile(r"R=(\d+),\s*G=(\d+),\s*B=(\d+)")


def _quiet_client_receive_thread() -> None:
    """The client's receive thread dies with a ConnectionError traceback when the server drops the socket; the
    backend handles the drop (reconnect, redo the scene), so hide that one traceback and keep all others."""

    previous = threading.excepthook
    if getattr(previous, "_commonlink_quiet", False):
        return

    def hook(args):
        if issubclass(args.exc_type, ConnectionError) and args.thread is not None and "receive_loop_queue" in args.thread.name:
            return
        previous(args)

    hook._commonlink_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class UnrealCVCommandError(BackendError):
    """The Unreal side answered ``error ...`` to a command."""

    def __init__(self, command: str, reply: str):
        super().__init__(
            f"UnrealCV answered {reply!r} to the command {command!r}.",
            "Check that the Unreal project has the classes the asset file names (spawned by class name, e.g. "
            "BP_Apple_C) and that the UnrealCV plugin version supports this command.",
        )
        self.command = command
        self.reply = reply


def _fmt(values) -> str:
    # UnrealCV parses plain fixed-point numbers: no exponents.
    return " ".join(f"{float(v):.4f}" for v in values)


def parse_color(reply: str) -> tuple[int, int, int]:
    """``"(R=12,G=34,B=56,A=255)"`` -> (12, 34, 56)."""
    match = _COLOR_RE.search(reply)
    if not match:
        raise BackendError(f"Unexpected reply to a colour query: {reply!r}.", "Update the UnrealCV plugin to 1.x.")
    return tuple(int(v) for v in match.groups())  # type: ignore[return-value]


def decode_png(data, what: str) -> np.ndarray:
    if not isinstance(data, (bytes, bytearray)) or not bytes(data[:8]) == b"\x89PNG\r\n\x1a\n":
        raise BackendError(f"UnrealCV did not send a PNG for {what} (got {str(data)[:80]!r}).", "Check the camera id and plugin version.")
    return np.asarray(Image.open(io.BytesIO(bytes(data))).convert("RGB"))


class UnrealCVBackend:
    """Render plans on ``host:port``; keeps one connection open across scenes."""

    def __init__(
        self,
        host: str,
        port: int,
        catalog: AssetCatalog,
        *,
        width: int,
        height: int,
        camera_id: int = 0,
        mask_tolerance: int = 3,
        reconnect_attempts: int = 3,
        timeout: float = 60.0,
    ):
        self.host, self.port, self.catalog = host, int(port), catalog
        self.width, self.height, self.camera_id = width, height, camera_id
        self.mask_tolerance, self.reconnect_attempts, self.timeout = mask_tolerance, reconnect_attempts, timeout
        self._client = None
        self.reconnects = 0  #: connections re-opened after a drop (for logs and tests)

    # -- connection ---------------------------------------------------------------------------------------
    def _connect(self) -> None:
        try:
            import unrealcv
        except ImportError as exc:
            raise MissingDependencyError("unrealcv", "render", "--backend unrealcv") from exc
        logging.getLogger("unrealcv").setLevel(logging.CRITICAL)
        _quiet_client_receive_thread()
        connected = False
        for delay in (0.0, 0.2, 0.5, 1.0):
            # A server that has not yet noticed the previous client leave rejects us: retry briefly.
            time.sleep(delay)
            client = unrealcv.Client((self.host, self.port))
            # The client's own retry loop sleeps ~1 min on a dead socket; we reconnect and redo the scene instead.
            client.RECONNECT_ATTEMPTS = 0
            with contextlib.redirect_stdout(io.StringIO()):  # the client prints connection chatter
                connected = client.connect(timeout=self.timeout)
            if connected:
                break
        if not connected:
            raise BackendError(
                f"Could not connect to UnrealCV at {self.host}:{self.port} (nothing listening, or another client is connected).",
                "Start the Unreal project with the UnrealCV plugin (port 9000 by default, see unrealcv.ini), close other "
                "clients, or pass --host/--port.",
            )
        self._client = client
        self._request(f"vset /camera/{self.camera_id}/size {self.width} {self.height}")
        self._remove_leftovers()

    def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception), contextlib.redirect_stdout(io.StringIO()):
                client.disconnect()

    def close(self) -> None:
        self._drop()

    def _check(self, command: str, reply):
        if reply is None:
            raise ConnectionError(f"no reply to {command!r}")
        if isinstance(reply, str) and reply.startswith("error"):
            raise UnrealCVCommandError(command, reply)
        return reply

    def _request(self, command: str):
        if self._client is None:
            raise ConnectionError("not connected")
        return self._check(command, self._client.request(command, timeout=self.timeout))

    def _batch(self, commands: list[str]) -> list:
        """Send several commands back to back and wait for all replies (one round trip of latency).

        The client's ``request_batch`` has no timeout (it waits forever on a frozen Unreal, or after its receive
        thread died), so it runs in a helper thread and we wait at most ``timeout`` seconds for it.
        """
        client = self._client
        if client is None:
            raise ConnectionError("not connected")
        outcome: dict = {}

        def call() -> None:
            try:
                outcome["replies"] = client.request_batch(commands)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                outcome["error"] = exc

        helper = threading.Thread(target=call, name="commonlink-unrealcv-batch", daemon=True)
        helper.start()
        helper.join(self.timeout)
        if helper.is_alive():
            # Unblock the helper once the connection is dropped (best effort: the queue is a client internal).
            with contextlib.suppress(Exception):
                client.recv_data_q.put(ConnectionError("connection dropped after a timeout"))
            raise TimeoutError(f"no reply within {self.timeout:g}s to a batch of {len(commands)} commands (first: {commands[0]!r})")
        if "error" in outcome:
            raise outcome["error"]
        return [self._check(c, r) for c, r in zip(commands, outcome["replies"])]

    def _remove_leftovers(self) -> None:
        names = [n for n in str(self._request("vget /objects")).split() if n.startswith(NAME_PREFIX)]
        if names:
            self._batch([f"vset /object/{n}/destroy" for n in names])

    # -- rendering ----------------------------------------------------------------------------------------
    def render(self, plan: ScenePlan) -> list[RenderedView]:
        if tuple(plan.resolution) != (self.width, self.height):
            raise BackendError(f"Plan resolution {plan.resolution} differs from the backend's {self.width}x{self.height}.")
        last: Exception | None = None
        for attempt in range(self.reconnect_attempts + 1):
            try:
                if self._client is None:
                    if attempt or last is not None:
                        self.reconnects += 1
                    self._connect()
                return self._render_once(plan)
            except (ConnectionError, TimeoutError, OSError, AssertionError) as exc:
                # AssertionError: the client's reply-id check failed, i.e. the stream is out of step.
                last = exc
                self._drop()
        raise BackendError(
            f"Lost the UnrealCV connection to {self.host}:{self.port} {self.reconnect_attempts + 1} times while rendering "
            f"scene {plan.scene_id} ({type(last).__name__}: {last}).",
            "Check that Unreal is still running; rerun the same command to resume from the last finished scene.",
        )

    def _render_once(self, plan: ScenePlan) -> list[RenderedView]:
        spawned: list[str] = []
        try:
            floor = self.catalog.floor(plan.floor.material)
            floor_name = self._request(f"vset /objects/spawn {floor.ue_class} {NAME_PREFIX}{plan.scene_id}_floor")
            spawned.append(str(floor_name))
            self._request(f"vset /object/{floor_name}/location 0.0000 0.0000 0.0000")
            names = []
            for k, obj in enumerate(plan.objects):
                name = str(self._request(f"vset /objects/spawn {obj.ue_class} {NAME_PREFIX}{plan.scene_id}_{k}"))
                spawned.append(name)
                names.append(name)
            setup = []
            for name, obj in zip(names, plan.objects):
                setup += [
                    f"vset /object/{name}/location {_fmt(obj.location)}",
                    f"vset /object/{name}/rotation {_fmt(obj.rotation)}",
                    f"vset /object/{name}/scale {_fmt([obj.scale] * 3)}",
                ]
            replies = self._batch(setup + [f"vget /object/{name}/color" for name in names])
            colors = [parse_color(str(r)) for r in replies[len(setup):]]
            views = []
            cam = f"/camera/{self.camera_id}"
            for camera in plan.cameras:
                self._batch([
                    f"vset {cam}/location {_fmt(camera.location)}",
                    f"vset {cam}/rotation {_fmt(camera.rotation)}",
                    f"vset {cam}/fov {camera.fov:.4f}",
                ])
                lit, mask = self._batch([f"vget {cam}/lit png", f"vget {cam}/object_mask png"])
                rgb = decode_png(lit, "lit")
                mask_rgb = decode_png(mask, "object_mask")
                views.append(RenderedView(rgb=rgb, instance=instance_ids_from_colors(mask_rgb, colors, self.mask_tolerance)))
            return views
        finally:
            if spawned and self._client is not None and self._client.isconnected():
                # Best effort: a failure here must not hide the original error; leftovers are removed on reconnect.
                with contextlib.suppress(ConnectionError, TimeoutError, OSError, AssertionError, BackendError):
                    self._batch([f"vset /object/{n}/destroy" for n in spawned])
