"""protocol.network.NodeConnections keeps a node's requests in the order they were
submitted, the ones that waited for its connection to open included."""

import asyncio

import pytest

from rafka.protocol import cluster_requests, network
from rafka.protocol.network import NodeConnections

pytestmark = pytest.mark.core


class _FrameRecorder:
    """A node that reads frames and answers none; `all_arrived` is set once every
    one of `names` has arrived (each a topic named in a Metadata request)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.received = bytearray()
        self.all_arrived = asyncio.Event()

    def names_in_order(self) -> list[str]:
        return sorted(self.names, key=lambda name: self.received.find(name.encode()))

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            self.received += data
            if all(self.received.find(name.encode()) >= 0 for name in self.names):
                self.all_arrived.set()


def test_a_request_submitted_as_the_connection_opens__goes_after_those_that_waited_for_it(monkeypatch):
    """The race `rafka demo` lost 1 run in 4: requests 0-2 wait for the node's
    connection; in the loop step where it comes up, before they wake, request 3 is
    submitted (the producer's sender ran in that step). It must not take the
    connection first: an idempotent producer's batches would reach the leader out of
    order."""
    names = [f"ordered-topic-{index}" for index in range(4)]

    async def scenario() -> list[str]:
        recorder = _FrameRecorder(names)
        server = await asyncio.start_server(recorder.serve, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()[:2]
        nodes = NodeConnections(client_id="order")
        last_submitted = asyncio.get_running_loop().create_future()
        real_open = network.Connection.open

        def submit(name: str) -> asyncio.Future:
            return asyncio.ensure_future(nodes.request(address, cluster_requests.metadata_request([name]),
                                                       expect_response=False))

        async def open_then_submit_one_more(*args, **kwargs):
            connection = await real_open(*args, **kwargs)
            # runs before the open's waiters are woken: the sender's step, submitting
            asyncio.get_running_loop().call_soon(lambda: last_submitted.set_result(submit(names[3])))
            return connection
        monkeypatch.setattr(network.Connection, "open", open_then_submit_one_more)
        try:
            first = [submit(name) for name in names[:3]]
            await asyncio.wait_for(asyncio.gather(*first, await last_submitted), timeout=10)
            await asyncio.wait_for(recorder.all_arrived.wait(), timeout=10)
            return recorder.names_in_order()
        finally:
            await nodes.close()
            server.close()

    assert asyncio.run(scenario()) == names
