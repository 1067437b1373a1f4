"""Shared fixtures. Backend-specific fixtures live beside their tests."""
