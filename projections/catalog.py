"""Projects and sessions as lists: what ``GET /projects`` and ``GET /sessions`` read."""

from __future__ import annotations

from typing import Any, Sequence

import apsw

from events import types as t
from events.errors import CorruptEvent
from events.reader import SEQ_MAX, SEQ_MIN, StoredEvent, StoredRow

from .projector import Projection


class ProjectsProjection(Projection):
    """One row per project (version 2 added the index of the list's order, ``projects_created``:
    a page of thousands of projects, oldest or newest first, is read from it, not sorted)."""

    name = "projects"
    version = 2
    needs_body = True
    tables = ("projects",)

    def create(self, conn: apsw.Connection) -> None:
        conn.execute(
            "CREATE TABLE projects(id TEXT PRIMARY KEY, name TEXT NOT NULL, workspace TEXT NOT NULL, "
            "created_ts INTEGER NOT NULL, seq INTEGER NOT NULL) WITHOUT ROWID"
        )
        # (read forwards for the list's own order, backwards for order=newest: see runtime.list_pages)
        conn.execute("CREATE INDEX projects_created ON projects(created_ts, id)")

    def apply(self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None) -> None:
        assert events is not None
        for se in events:
            if isinstance(se.event, t.ProjectCreated) and se.project_id:
                conn.execute(
                    "INSERT OR REPLACE INTO projects(id, name, workspace, created_ts, seq) VALUES (?, ?, ?, ?, ?)",
                    (se.project_id, se.event.name, se.event.workspace, se.ts, se.seq),
                )


SESSION_COLUMNS = (
    "id, project_id, name, model, thinking_level, created_ts, updated_ts, last_seq, deleted, "
    "forked_from_session, forked_from_seq, open_tasks, queued, open_questions, quarantined"
)


class SessionsProjection(Projection):
    """One row per session; counts kept from kinds so the list shows running/queued/awaiting an
    answer cheaply (version 2 added the open questions: the list said `running` where the view
    said `awaiting_answer`; version 3 the quarantine: the list said `idle` or `running` where the
    view said `quarantined`; version 4 the background jobs without their end, so a restart wakes
    their sessions to record them lost; version 5 the indexes of the list's order, newest first
    then by id, ``sessions_created`` for every session and ``sessions_project`` within a project:
    a page is read from them, where the whole table was sorted to find the newest)."""

    name = "sessions"
    version = 5
    needs_body = True
    tables = ("sessions", "session_questions", "session_jobs")

    def create(self, conn: apsw.Connection) -> None:
        conn.execute(
            "CREATE TABLE sessions(id TEXT PRIMARY KEY, project_id TEXT, name TEXT, model TEXT, "
            "thinking_level TEXT, created_ts INTEGER NOT NULL, updated_ts INTEGER NOT NULL, "
            "last_seq INTEGER NOT NULL, deleted INTEGER NOT NULL DEFAULT 0, forked_from_session TEXT, "
            "forked_from_seq INTEGER, open_tasks INTEGER NOT NULL DEFAULT 0, queued INTEGER NOT NULL DEFAULT 0, "
            "open_questions INTEGER NOT NULL DEFAULT 0, quarantined INTEGER NOT NULL DEFAULT 0)"
        )
        # (the order of the list, runtime.list_pages.SESSIONS: a page is read from the index)
        conn.execute("CREATE INDEX sessions_created ON sessions(created_ts DESC, id)")
        conn.execute("CREATE INDEX sessions_project ON sessions(project_id, created_ts DESC, id)")
        # The questions asked and not yet answered or cancelled (a count alone would go wrong on
        # an answer recorded twice).
        conn.execute("CREATE TABLE session_questions(session_id TEXT NOT NULL, question_id TEXT NOT NULL, "
                     "PRIMARY KEY(session_id, question_id)) WITHOUT ROWID")
        conn.execute("CREATE TABLE session_jobs(session_id TEXT NOT NULL, job_id TEXT NOT NULL, "
                     "PRIMARY KEY(session_id, job_id)) WITHOUT ROWID")

    def apply(self, conn: apsw.Connection, rows: Sequence[StoredRow], events: Sequence[StoredEvent] | None) -> None:
        assert events is not None
        for se in events:
            sid = se.session_id
            if sid is None:
                continue
            ev = se.event
            if isinstance(ev, t.SessionCreated):
                if ev.forked_from_seq is not None and not SEQ_MIN <= ev.forked_from_seq <= SEQ_MAX:
                    # MessagePack holds integers up to 2**64 - 1; no seq (nor SQLite) goes past 2**63 - 1.
                    raise CorruptEvent(
                        f"session.created forks from seq {ev.forked_from_seq}, which no seq can be"
                    ).at(se.seq)
                conn.execute(
                    "INSERT OR REPLACE INTO sessions(id, project_id, name, model, thinking_level, created_ts, "
                    "updated_ts, last_seq, forked_from_session, forked_from_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (sid, se.project_id, ev.name, ev.model, ev.thinking_level, se.ts, se.ts, se.seq,
                     ev.forked_from_session, ev.forked_from_seq),
                )
                continue
            sets: list[str] = ["updated_ts = ?", "last_seq = ?"]
            args: list[Any] = [se.ts, se.seq]
            if isinstance(ev, t.SessionConfigured):
                if ev.model is not None:
                    sets.append("model = ?")
                    args.append(ev.model)
                if ev.thinking_level is not None:
                    sets.append("thinking_level = ?")
                    args.append(ev.thinking_level)
                sets += [f"{column} = NULL" for column in ("model", "thinking_level", "name") if column in ev.reset]
            elif isinstance(ev, t.SessionNamed):
                sets.append("name = ?")
                args.append(ev.name)
            elif isinstance(ev, t.SessionDeleted):
                sets.append("deleted = 1")
            elif isinstance(ev, t.SessionQuarantined):
                sets.append("quarantined = 1")
            elif isinstance(ev, t.TaskStarted) and se.agent_id == "main":
                sets.append("open_tasks = open_tasks + 1")
            elif isinstance(ev, t.TaskFinished) and se.agent_id == "main":
                sets.append("open_tasks = max(open_tasks - 1, 0)")
            elif isinstance(ev, t.InputSubmitted):
                sets.append("queued = queued + 1")
            elif isinstance(ev, (t.InputPlaced, t.InputWithdrawn)):
                sets.append("queued = max(queued - 1, 0)")
            elif isinstance(ev, t.QuestionAsked):
                conn.execute("INSERT OR IGNORE INTO session_questions(session_id, question_id) VALUES (?, ?)",
                             (sid, ev.question_id))
                if conn.changes():
                    sets.append("open_questions = open_questions + 1")
            elif isinstance(ev, (t.QuestionAnswered, t.QuestionCancelled)):
                conn.execute("DELETE FROM session_questions WHERE session_id = ? AND question_id = ?",
                             (sid, ev.question_id))
                if conn.changes():
                    sets.append("open_questions = max(open_questions - 1, 0)")
            elif isinstance(ev, t.JobStarted):
                conn.execute("INSERT OR IGNORE INTO session_jobs(session_id, job_id) VALUES (?, ?)", (sid, ev.job_id))
            elif isinstance(ev, t.JobFinished):
                conn.execute("DELETE FROM session_jobs WHERE session_id = ? AND job_id = ?", (sid, ev.job_id))
            conn.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?", (*args, sid))
