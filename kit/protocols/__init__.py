"""Protocols: validated protocol files (data) and the procedures that run them, one package per kind
(kit/protocols/<kind>/: its model and procedure, records, results, views and the engines it runs on),
registered once in kit.protocols.kinds (kit.protocols.kind: what a kind is and how to add one).
Shared by the kinds: the model base (spec), bounds, the procedure's contract (procedure), the speed
probe (estimate), a run folder's OK passes (passes) and the results files (results_files)."""
