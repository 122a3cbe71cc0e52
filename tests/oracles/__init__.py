"""Brute-force oracles: slow, obviously-correct reference implementations for the tests."""
