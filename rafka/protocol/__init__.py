"""The Kafka wire protocol, as a layer of its own (DESIGN section 2, STYLE point 11).

It turns bytes into typed requests and typed responses into bytes, and routes each
request to one small handler per API; it decides nothing about logs or groups (that
is `rafka.core`) and owns no socket or event loop (that is the actor's server).

    framing     size-prefixed frames, request/response headers
    bounds      Kafka's "no collection larger than the bytes left" check, before kio
    dispatch    (api_key, versions) -> handler; Kafka's answers to bad requests
    handlers/   one module per API
    errors      ProtocolError: the connection must be closed

Message types come from `kio` (generated from Kafka's own JSON schemas). This
package never imports Ray.
"""
