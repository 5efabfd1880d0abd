"""One module per schema revision (Alembic loads them by file name; this file makes them package data)."""
