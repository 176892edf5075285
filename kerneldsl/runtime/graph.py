"""CUDA graphs captured from a stream and replayed as one launch.

Capture uses thread-local mode: other threads of the process may keep using CUDA, and this
thread's own unsafe calls fail loudly instead of corrupting the capture. While a capture is
open the session does not drain deferred frees (a cuMemFree would invalidate it). The session is
known here by ``CapturingSession``, what a capture and its graph read of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from . import driver
from .driver import check
from .handle import Handle, check_same_session
from .stream import Stream, StreamSession

if TYPE_CHECKING:
    from .device import Device

# cuGraphInstantiate flag: memory the graph allocated (arrays made during the capture, allocation
# nodes of the session's pool) and did not free is freed before each relaunch, so a graph whose
# temporaries outlive the capture can be replayed again and again.
AUTO_FREE_ON_LAUNCH = 1


class CapturingSession(StreamSession, Protocol):
    """A session as a capture and its graph see it: a stream's, with its device (a replay's
    failure is reported as the device reports it), the graphs it is capturing (a list this
    module adds to and takes from), and its keep-alives."""

    @property
    def gpu(self) -> Device: ...

    @property
    def captures(self) -> list[Graph]: ...

    def keep_alive(self, obj: Any, stream: Stream | None = None) -> None: ...


class Graph(Handle):
    """An instantiated graph; it keeps alive every object registered while it was captured."""

    kind = "graph"
    __slots__ = ("_exec", "_keep")
    session: CapturingSession

    def __init__(self, session: CapturingSession) -> None:
        super().__init__(session)
        self._exec: Any = None
        self._keep: list[Any] = []

    def keep_alive(self, obj: Any) -> None:
        """Keep ``obj`` (e.g. a buffer a captured kernel uses) alive as long as the graph."""
        self._keep.append(obj)

    def replay(self, stream: Stream | None = None) -> None:
        """Launch the whole graph on ``stream`` (default: the session stream)."""
        self._check()
        if self._exec is None:
            raise RuntimeError("the graph is still being captured")
        session = self.session
        stream = session.stream if stream is None else stream
        stream._check()
        check_same_session(self, stream)
        with session.activated():
            err = session.api.cuGraphLaunch(self._exec, stream._cu)[0]
            if err:
                if session.gpu.host:
                    raise session.api.launch_failure(int(err), "cuGraphLaunch")
                raise driver.error("cuGraphLaunch", err, launch=True)
            session.keep_alive(self, stream)

    def __repr__(self) -> str:
        return f"<Graph session={self.session.session_id} device={self.device} objects={len(self._keep)}>"


@contextlib.contextmanager
def capture(session: CapturingSession, stream: Stream | None = None) -> Iterator[Graph]:
    """Record the work enqueued on ``stream`` inside the block into a replayable Graph."""
    stream = session.stream if stream is None else stream
    stream._check()
    check_same_session(session.stream, stream)
    d = session.api
    graph = Graph(session)
    mode = d.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    with session.activated():
        check("cuStreamBeginCapture", d.cuStreamBeginCapture(stream._cu, mode))
        session.captures.append(graph)
    try:
        yield graph
    except BaseException:
        with session.activated_unchecked():
            _end_capture(session, graph)
            err, raw_graph = d.cuStreamEndCapture(stream._cu)
            if not err:
                d.cuGraphDestroy(raw_graph)
        raise
    with session.activated():
        _end_capture(session, graph)
        raw_graph = check("cuStreamEndCapture", d.cuStreamEndCapture(stream._cu))
        try:
            raw_exec = check("cuGraphInstantiate", d.cuGraphInstantiate(raw_graph, AUTO_FREE_ON_LAUNCH))
        except BaseException:
            d.cuGraphDestroy(raw_graph)
            raise
        graph._exec = raw_exec
        graph._own((raw_exec, raw_graph))


def _end_capture(session: CapturingSession, graph: Graph) -> None:
    if graph in session.captures:
        session.captures.remove(graph)
