"""A toy engine, added the way docs/architecture.md's "How to add" says, from outside the kit: its adapter
(`client.py`) and its registration `ENGINE`, which the entry point `toy = toy_engine` of the group
`kit.engines` names (tests/protocols/test_add_an_engine.py installs it)."""

from kit.engines.registry import EngineKind

ENGINE = EngineKind("toy", "Toy engine", "toy_engine.client:ToyEngine", runs=True, logprobs=True,
                    proof="toy_engine.client:proof", takes_model=False)
