"""An ordinary FastAPI app: `uvicorn fastapi_app:app`. No health route.

GET /block?ms=N calls time.sleep in an async endpoint, blocking the event loop (the
classic mistake that makes a worker stuck).
"""

import os
import time

from fastapi import FastAPI

app = FastAPI()


@app.get("/")
async def root():
    return {"app": "fastapi", "pid": os.getpid()}


@app.get("/block")
async def block(ms: int = 10000):
    time.sleep(ms / 1000)
    return {"app": "fastapi", "pid": os.getpid(), "blocked": True}
