"""`kit atlas`: many verified runs side by side, one row per engine x build x machine x CPU backend x weight
format x cache setting (kit.atlas.table), read from verified inputs only (kit.atlas.sources), shown in the
terminal, as an HTML page and as CSV (kit.atlas.render)."""
