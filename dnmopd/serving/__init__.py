"""HTTP plumbing shared by the teacher scorers and rollout engines that talk to SGLang or vLLM servers:
replica pools with retries (`pool`), blocking calls into the async clients (`blocking`), token-id validation
(`token_ids`), error types (`errors`), server launch, each server kind's health route and the server map
(`servers`), and HF folders for weight updates from disk (`hf_folder`)."""
