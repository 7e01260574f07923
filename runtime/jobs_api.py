"""HTTP routes of a session's background jobs (F-HAR-2), under ``/api/v1/sessions/{id}/jobs``.

``GET …/jobs`` lists them (status from the log, ``outputBytes`` while the daemon holds their
output); ``GET …/jobs/{jobId}?offset&limit`` is one job with its output from byte ``offset``
(``output``, ``offset``, ``nextOffset``, ``eof``, ``droppedBefore``, ``source``: ``memory``,
``saved`` or ``tail``); ``POST …/jobs/{jobId}/stop`` (strong trust) stops a running one and answers with its
record once its end is recorded. Errors: ``JOB_NOT_FOUND`` 404, ``JOB_FINISHED`` 409.
"""

from __future__ import annotations

from quart import Response
from quart_trio import QuartTrio

from . import jobs as j
from .http_parts import EmptyBody, camel_keys, check_id, int_arg, json_response, read_body, require_strong
from .services import Services

MAX_READ_LIMIT = 1024 * 1024
DEFAULT_READ_LIMIT = 64 * 1024


def add_job_routes(app: QuartTrio, svc: Services) -> None:
    @app.get("/api/v1/sessions/<sid>/jobs")
    async def list_jobs(sid: str) -> Response:
        check_id(sid, "session id")
        jobs = await svc.call(sid, j.ListJobs())
        return json_response({"jobs": [camel_keys(x) for x in jobs]})

    @app.get("/api/v1/sessions/<sid>/jobs/<job_id>")
    async def read_job(sid: str, job_id: str) -> Response:
        check_id(sid, "session id")
        check_id(job_id, "job id")
        offset = int_arg("offset", 0, 0, None)
        limit = int_arg("limit", DEFAULT_READ_LIMIT, 1, MAX_READ_LIMIT)
        job = await svc.call(sid, j.ReadJob(job_id, offset, limit))  # (scrubbed: SessionJobs.read)
        return json_response(camel_keys(job))

    @app.post("/api/v1/sessions/<sid>/jobs/<job_id>/stop")
    async def stop_job(sid: str, job_id: str) -> Response:
        require_strong("stop jobs")
        check_id(sid, "session id")
        check_id(job_id, "job id")
        await read_body(EmptyBody)
        return json_response(camel_keys(await svc.call(sid, j.StopJob(job_id))))
