"""The event log: one tagged union of events, its codec, and the SQLite store.

Everything Lens does is an event appended here; everything else (projections, actors,
HTTP views, the SSE stream) is derived from this log.
"""
