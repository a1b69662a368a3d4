"""What every model call shares: the persistent response cache, one retry policy, and one
resolution of an OpenAI-compatible endpoint and its API key (from the environment only)."""
