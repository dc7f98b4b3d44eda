"""Replaying a recorded run on this machine (`kit replay`) and holding it against the original."""
