"""The agent-event/v1 contract: models, decoding with reasons, the JSON Schema. Pure."""
