"""A plain ASGI app, no framework, as uvicorn serves it: `uvicorn asgi_app:app`.

It knows nothing of scalpel. GET / answers who served it; GET …/block?ms=N blocks the event
loop for N ms (a handler that never returns, for any N longer than the test).
"""

import json
import os
import time
from urllib.parse import parse_qs


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"].endswith("/block"):
        ms = int(parse_qs(scope["query_string"].decode()).get("ms", ["10000"])[0])
        time.sleep(ms / 1000)  # blocks the whole event loop, as a sync call in async code does
    body = json.dumps({"app": "asgi", "pid": os.getpid()}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": body})
