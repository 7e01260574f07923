"""Read models derived from the event log; disposable, rebuilt from the log alone."""
