"""When the server may start a connection's next request before this one is answered.

Kafka's broker serves one request per connection at a time (SocketServer mutes a
channel from a receive until its response is sent). rafka keeps Kafka's order for
everything that happens in request order, the appends and the responses, but lets
a request release its connection once that part is done: a Produce that has
appended its batches and now waits for its acks (replication to the ISR) calls
`admit_next()`, and the server reads and starts the connection's next request
while this one waits; responses are still written in the order the requests came.
A producer with several requests in flight (Kafka's
max.in.flight.requests.per.connection, 5) so keeps the leader's log busy while
replication runs, which a Python broker needs: each request costs it about ten
times what it costs the JVM. A handler that never calls `admit_next()` holds its
connection until it is answered, as in Kafka.

Invariant: `admit_next()` is called only after everything the request does in
request order has been done (no await in between), so requests of one connection
take effect in the order they were sent.

Callers: the server (`admitting`, per request task), the Produce handler
(`admit_next`), protocol.edge (`admission`: a relayed Produce admits the next
request once written to every actor it goes to).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

_ADMISSION: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar("rafka_admission",
                                                                                      default=None)


def admitting(admit: Callable[[], None]) -> None:
    """In a request's task: `admit()` lets the connection's next request start; the
    first `admit_next()` calls it, later ones do nothing."""
    _ADMISSION.set(admit)


def admit_next() -> None:
    """The request's ordered part is done: its connection's next request may start."""
    admit = _ADMISSION.get()
    if admit is not None:
        _ADMISSION.set(None)
        admit()


def admission() -> Callable[[], None]:
    """The current request's `admit_next`, to call later from any task (the parts
    of a request split over several connections): the first call admits, later
    ones do nothing."""
    admit = _ADMISSION.get()
    _ADMISSION.set(None)
    done = False

    def once() -> None:
        nonlocal done
        if not done and admit is not None:
            done = True
            admit()
    return once
