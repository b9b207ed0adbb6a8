package model

// ProviderTypes are the provider types of docs/classification.md#provider-types: a type selects the
// provider's wire adapter and its built-in rules. A config file and a
// scenario file refuse any other value, because an unknown type would
// silently run without its rules.
var ProviderTypes = []string{"openai", "anthropic", "gemini", "local", "glm", "agentrouter", "opencode"}
