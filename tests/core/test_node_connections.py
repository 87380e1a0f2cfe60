"""protocol.network.NodeConnections keeps a node's requests in the order they were
submitted, the ones that waited for its connection to open included."""

import asyncio

import pytest

from rafka.protocol import cluster_requests, network
from rafka.protocol.network import NodeConnections

pytestmark = pytest.mark.core


class _FrameRecorder:
    """A node that reads frames and answers none: the topic names in the order
    their Metadata requests arrived."""

    def __init__(self) -> None:
        self.received = bytearray()

    def names_in_order(self, names: list[str]) -> list[str]:
        return sorted(names, key=lambda name: self.received.find(name.encode()))

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            self.received += data


def test_a_request_submitted_as_the_connection_opens__goes_after_those_that_waited_for_it(monkeypatch):
    """The race `rafka demo` lost 1 run in 4: requests 0-2 wait for the node's
    connection; in the loop step where it comes up, before they wake, request 3 is
    submitted (the producer's sender ran in that step). It must not take the
    connection first: an idempotent producer's batches would reach the leader out of
    order."""
    names = [f"ordered-topic-{index}" for index in range(4)]

    async def scenario() -> list[str]:
        recorder = _FrameRecorder()
        server = await asyncio.start_server(recorder.serve, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()[:2]
        nodes = NodeConnections(client_id="order")
        submitted: list[asyncio.Task] = []
        real_open = network.Connection.open

        async def open_then_submit_one_more(*args, **kwargs):
            connection = await real_open(*args, **kwargs)
            # runs before the open's waiters are woken: the sender's step, submitting
            asyncio.get_running_loop().call_soon(lambda: submitted.append(asyncio.ensure_future(
                nodes.request(address, cluster_requests.metadata_request([names[3]]), expect_response=False))))
            return connection
        monkeypatch.setattr(network.Connection, "open", open_then_submit_one_more)
        try:
            submitted.extend(asyncio.ensure_future(nodes.request(
                address, cluster_requests.metadata_request([name]), expect_response=False)) for name in names[:3])
            while len(submitted) < 4 or not all(task.done() for task in submitted):
                await asyncio.sleep(0.01)
            for task in submitted:
                task.result()
            while any(recorder.received.find(name.encode()) < 0 for name in names):
                await asyncio.sleep(0.01)
            return recorder.names_in_order(names)
        finally:
            await nodes.close()
            server.close()

    assert asyncio.run(scenario()) == names
