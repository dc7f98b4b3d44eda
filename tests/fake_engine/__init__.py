"""One fake engine for tests, for the engines that cannot run here (vLLM and Ollama need a GPU or a daemon;
llama-server cannot run inside a fake container). Each dialect answers with the recorded real response
shapes (tests/fixtures/vllm, tests/fixtures/ollama; llama.cpp's and the OpenAI chat shape as the kit's
own clients parse them) and records every request.

- core.py: `FakeEngine`, the base: a handler usable as `fake.transport()` (httpx.MockTransport) or
  `with fake.serve() as url` (a loopback HTTP server in a thread); `recorded(engine, name)` reads a
  recorded response.
- llamacpp.py: `LlamaCpp` (llama-server's endpoints; fails on cue, `Failure`) and `engine_factory` for a
  DockerProvider whose containers are fake.
- vllm.py: `VllmReplay` (recorded fixtures in a scripted order) and `VllmModel` (a deterministic model
  with vLLM's prefix cache); vllm_serve.py runs `VllmModel` as a `vllm serve` process; vllm_docker.py
  makes fake Docker containers of it.
- ollama.py: `Ollama` (recorded shapes; subclasses simulate an instance's cache states).
- clock.py: `Clock`, a fake clock whose `sleep` advances it.

Engines that are not HTTP servers at all stay where their test is: the doctor's probes of the embedded
engine (tests/test_doctor.py), the BFCL agent's scripted model (tests/workloads/bfcl/bfcl_fakes.py).
"""
