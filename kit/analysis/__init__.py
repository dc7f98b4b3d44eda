"""Analysis: reads run folders (manifest + records) only, never the runner's memory."""
