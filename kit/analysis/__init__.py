"""Analysis: reads run folders (manifest + records) only, never the runner's memory."""

from kit.core.paths import confine_library_caches

confine_library_caches()  # the statistics stack (arch) imports matplotlib, which keeps a font cache
