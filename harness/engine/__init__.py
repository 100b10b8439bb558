"""Engine adapters: replay (recorded turns), the in-process vLLM engine, OpenAI-compatible servers."""
