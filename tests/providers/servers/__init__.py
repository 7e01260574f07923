"""Loopback servers that speak the providers' real wire protocols, for the official SDK clients.

:class:`~tests.providers.servers.base.ScriptedServer` is a raw ASGI app served by hypercorn's
trio worker on ``127.0.0.1:0`` inside the test's trio run. Each test queues the replies it wants
(a streamed response, an HTTP error with the provider's error body, a stream that stalls until the
client goes away) and reads back every request it received (path, headers, parsed JSON body).
The event builders in the protocol modules produce the exact SSE shapes the SDK stream helpers
expect (``response.content_part.added``, ``input_json_delta``, a final usage chunk…).
"""
