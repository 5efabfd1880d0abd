from tests.api.conftest import topic

__all__ = ["topic"]
