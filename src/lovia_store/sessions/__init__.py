"""Conversation history: lovia's Session contract, its SQL and in-memory stores, the Raw Log."""
