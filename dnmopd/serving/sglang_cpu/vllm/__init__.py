"""Not vLLM: the one op SGLang's CPU path imports from it (see ../README.md)."""
