"""The launcher's screens: picker → setup → live run → results, plus help."""
