"""The remedy kind: fixes held against the unfixed engine on the paper's workloads (docs/remedy.md). Its
registration (`KIND`, kit.protocols.kind) is in `protocol`, which the registry (kit.protocols.kinds) imports;
nothing is imported here, so code that only reads the kind's files loads none of the machinery that runs it."""
