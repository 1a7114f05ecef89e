"""A plain WSGI app for gunicorn's sync worker: `gunicorn wsgi_app:app`.

GET /block?ms=N sleeps in the handler: the sync worker serves one request at a time, so
it is stuck for N ms.
"""

import json
import os
import time
from urllib.parse import parse_qs


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/block":
        ms = int(parse_qs(environ.get("QUERY_STRING", "")).get("ms", ["10000"])[0])
        time.sleep(ms / 1000)
    body = json.dumps({"app": "wsgi", "pid": os.getpid()}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
