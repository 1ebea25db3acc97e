"""The ways a run's sandbox is started, one module each behind one interface (base.py):
a bwrap per run, with its prespawn pool (bwrap.py); the zygote, one long-lived process
that starts every run (zygote.py, zygote_client.py, zygote.c and zygote_root.c); and, where bubblewrap is
missing and that is allowed, no isolation (unisolated.py)."""
