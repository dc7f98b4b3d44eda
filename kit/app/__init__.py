"""What a person runs besides the launcher (kit.tui): the console views, `kit doctor`, `kit check`."""
