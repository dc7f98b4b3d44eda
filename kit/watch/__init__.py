"""`kit watch`: a pass-through proxy in front of an engine that classifies the cache state of every call,
records hashes (kit.record.model.WatchRecord) in a run folder of the `watch` kind, and raises alarms when
the same request gets different outputs (kit.record.alarms)."""
