"""What a run folder holds and how it is read: records, records files, the manifest, provenance."""
