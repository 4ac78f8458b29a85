"""Engine flags in and out: vLLM (reference), SGLang and TGI equivalents."""
