"""The demo's stage processes (rendering and the release build run each in a child, so their memory never
stays under the rest of the demo): a child's error comes back as the error it was, problem and fix apart, and a
child that dies says how."""

import os
import signal

import pytest

from commonlink.demo import _StageProcess
from commonlink.errors import BackendError, InputError, check_at_least


def test_a_stage_child_answers_calls_and_sends_back_errors_as_they_were():
    with _StageProcess("test") as stage:
        stage.call(check_at_least, "--limit", 3, 1)  # returns: nothing raised
        with pytest.raises(InputError) as err:
            stage.call(check_at_least, "--limit", 0, 1, "Use --limit 1 or more.")
        assert (err.value.problem, err.value.fix) == ("--limit 0 must be at least 1.", "Use --limit 1 or more.")
        with pytest.raises(BackendError, match=r"ValueError: invalid literal for int\(\)") as err:
            stage.call(int, "not a number")  # not ours: named with its type, the traceback's end as the fix
        assert "ValueError" in err.value.fix
        stage.call(check_at_least, "--limit", 2, 1)  # the child still serves after an error
        with pytest.raises(BackendError, match="test process exited with status 3 before it finished") as err:
            stage.call(os._exit, 3)
        assert "Rerun the same demo command" in err.value.fix
    assert not stage.child.is_alive()


def test_a_stage_child_killed_by_a_signal_is_named():
    with _StageProcess("release build") as stage, pytest.raises(BackendError, match="killed by signal SIGKILL"):
        stage.call(os.kill, stage.child.pid, signal.SIGKILL)
