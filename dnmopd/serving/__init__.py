"""HTTP plumbing shared by the teacher scorers and rollout engines that talk to SGLang or vLLM servers:
replica pools with retries (`pool`), blocking calls into the async clients (`blocking`), token-id validation
(`token_ids`), error types (`errors`), server launch, each server kind's health route and the server map
(`servers`), the set of servers `launch/start_servers.py` starts (`server_set`), each server's HTTP API
(`sglang_api`, `vllm_api`), HF folders for weight updates from disk (`hf_folder`), the process group that
broadcasts weight updates into SGLang servers (`weight_group`), and the CPU stand-in for the one vLLM op SGLang
imports (`sglang_cpu/`, put on an SGLang server's path, never imported here)."""
