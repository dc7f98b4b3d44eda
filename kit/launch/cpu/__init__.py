"""The CPU backends of the embedded llama-server: which one runs and why, the extensions a library's machine code uses, the portable one built here, and the answer to a SIGILL."""
