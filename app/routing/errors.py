"""Faults of the route registry, for the API layer to translate (error code 50303)."""

from __future__ import annotations


class RegistryUnavailableError(Exception):
    """The route registry's database could not be reached, or did not answer in time."""
